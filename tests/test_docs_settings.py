"""Every environment variable the code reads is documented, and nothing more.

The reads are found in the source with :mod:`ast`, not by importing it: a call of
``config.env``'s readers (``env_str``, ``env_int``, ``env_bool``, ``env_list``), a
``get`` on ``os.environ`` or on a mapping named ``environ``, ``env`` or ``source``
(the readers' and the Redis bootstrap's parameter), ``os.getenv``, and
``os.environ[...]`` read. The name is a string literal or a module-level string
constant (``CACHE_SWITCH_VARIABLE = "LIBRARY_CACHE"``); a name only known at run time
(the readers' own ``source.get(name)``) is not a variable of its own, nor is a
reader's name given a mapping of its own (``env_int("X", 1, env={...})``).

- The system's code (every app, ``config``, ``scripts``, ``manage.py``; not the tests
  or the test settings) must read exactly the variables of ``docs/configuration.md``'s
  tables.
- What only the tests read (``config/settings_test.py``, ``conftest.py``, the tests)
  must be in ``docs/tests.md``'s tables.

A table lists a variable in its first column, in backticks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_DIRS = (
    "bench",
    "config",
    "course",
    "jobs",
    "library",
    "messaging",
    "realtime",
    "scripts",
)
TEST_SETTINGS = ("config/settings_test.py", "conftest.py")
READERS = frozenset({"env_str", "env_int", "env_bool", "env_list"})
MAPPINGS = frozenset({"environ", "env", "source"})
VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*")
# Read, but the operating system's, not the project's: passed on to a sandbox's
# processes as it is.
NOT_OURS = frozenset({"PATH"})


def _is_test(path: Path) -> bool:
    relative = path.relative_to(ROOT)
    return "tests" in relative.parts or relative.as_posix() in TEST_SETTINGS


def _python_files() -> Iterator[Path]:
    yield ROOT / "manage.py"
    yield ROOT / "conftest.py"
    yield from sorted((ROOT / "tests").rglob("*.py"))
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _constants(trees: Iterable[ast.Module]) -> dict[str, str]:
    """Return the module-level string constants of ``trees`` by name."""
    found: dict[str, str] = {}
    for tree in trees:
        for node in tree.body:
            target: ast.expr | None = None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            elif isinstance(node, ast.AnnAssign):
                target = node.target
            value = getattr(node, "value", None)
            if (
                isinstance(target, ast.Name)
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            ):
                found.setdefault(target.id, value.value)
    return found


def _is_os_environ(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _read_argument(node: ast.AST) -> ast.expr | None:
    """Return the expression naming the variable ``node`` reads, if it reads one."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.slice if _is_os_environ(node.value) else None
    if not isinstance(node, ast.Call) or not node.args:
        return None
    function = node.func
    if isinstance(function, ast.Name) and function.id in READERS:
        # With ``env=`` a reader reads the mapping it is given (its own tests).
        given = any(keyword.arg == "env" for keyword in node.keywords)
        return None if given else node.args[0]
    if not isinstance(function, ast.Attribute):
        return None
    owner = function.value
    if function.attr == "get" and (
        _is_os_environ(owner) or (isinstance(owner, ast.Name) and owner.id in MAPPINGS)
    ):
        return node.args[0]
    if function.attr == "getenv" and isinstance(owner, ast.Name) and owner.id == "os":
        return node.args[0]
    return None


def _name_of(argument: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        text = argument.value
    elif isinstance(argument, ast.Name):
        text = constants.get(argument.id, "")
    else:
        return None
    return text if VARIABLE.fullmatch(text) else None


@cache
def variables_read() -> tuple[frozenset[str], frozenset[str]]:
    """Return the variables the system's code reads, and those the tests read."""
    trees = {
        path: ast.parse(path.read_text(encoding="utf-8")) for path in _python_files()
    }
    constants = _constants(trees.values())
    code: set[str] = set()
    tests: set[str] = set()
    for path, tree in trees.items():
        into = tests if _is_test(path) else code
        for node in ast.walk(tree):
            argument = _read_argument(node)
            name = _name_of(argument, constants) if argument is not None else None
            if name is not None:
                into.add(name)
    return frozenset(code - NOT_OURS), frozenset(tests - NOT_OURS)


def documented(doc: Path) -> set[str]:
    """Return the variables named in the first column of ``doc``'s tables."""
    names: set[str] = set()
    for line in doc.read_text(encoding="utf-8").splitlines():
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 3 or set(cells[1]) <= {"-", " "}:
            continue
        names.update(
            name
            for name in re.findall(r"`([^`]+)`", cells[1])
            if VARIABLE.fullmatch(name)
        )
    return names


def test_every_variable_the_code_reads_is_in_the_configuration_docs() -> None:
    code, _ = variables_read()
    missing = code - documented(ROOT / "docs" / "configuration.md")
    assert missing == set(), "read by the code, not in docs/configuration.md"


def test_the_configuration_docs_list_no_variable_the_code_no_longer_reads() -> None:
    code, _ = variables_read()
    stale = documented(ROOT / "docs" / "configuration.md") - code
    assert stale == set(), "in docs/configuration.md, read by no code"


def test_every_variable_only_the_tests_read_is_in_the_test_docs() -> None:
    code, tests = variables_read()
    listed = documented(ROOT / "docs" / "tests.md")
    assert tests - code - listed == set(), "read by the tests, not in docs/tests.md"
    assert listed - tests == set(), "in docs/tests.md's tables, read by no test"


def test_the_scanner_finds_each_way_of_reading() -> None:
    code, tests = variables_read()
    assert "LIBRARY_LAB_NICE" in code  # env_int("LIBRARY_LAB_NICE", ...)
    assert "LIBRARY_CACHE" in code  # os.environ.get(CACHE_SWITCH_VARIABLE, ...)
    assert "REDIS_URL" in code  # env.get("REDIS_URL", ...) in the Redis bootstrap
    assert "LIBRARY_ENV_FILE" in code  # source.get(ENV_FILE_VARIABLE)
    assert "BENCH_REDIS_DB" in code
    assert "LIBRARY_TEST_REDIS_DBS" in tests - code
    assert "LIBRARY_POISON_BOOK_FILE" in tests - code  # os.environ[...]
