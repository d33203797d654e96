"""The layout's rules that import-linter cannot state.

import-linter (``make lint``) holds the arrows between apps and the acyclic siblings of
each package. Three rules are finer than a contract can say, so they are read off the
source here with :mod:`ast`:

- no cycle between any two modules, a package's ``__init__`` included (a package that
  re-exports a submodule which imports the package back is a cycle too);
- no module imports another module's ``_private`` name: what a sibling needs is public;
- no project import inside a function, except in ``AppConfig.ready()`` (Django's place
  for start-up registration) or on a line that says why (``# local import: <reason>``).
  ``bench`` is exempt from this one: ``python -m bench`` loads every benchmark module
  before it points Django at the benchmark's own database, so a benchmark imports
  models only once ``django_setup()`` has run.

``python tests/test_architecture.py`` prints the same findings as a report.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("bench", "course", "realtime", "library", "messaging", "jobs", "config")
REASON = "# local import:"


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    name: str | None
    line: int
    local: bool
    allowed_local: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every module of the apps, without their tests and migrations."""
    found: dict[str, Path] = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            parts = path.relative_to(ROOT).parts
            if "tests" in parts or "migrations" in parts:
                continue
            found[_module_name(path)] = path
    return found


def _owner(name: str, modules: dict[str, Path]) -> str:
    """The module that defines ``name`` (``pkg.mod.func`` -> ``pkg.mod``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _function_bodies(tree: ast.AST) -> dict[int, str]:
    """Map the id of every node inside a function to that function's name."""
    inside: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for sub in ast.walk(node):
                if sub is not node:
                    inside.setdefault(id(sub), node.name)
    return inside


def _targets(node: ast.AST, package: str) -> Iterator[tuple[str, str | None]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*parts, *([node.module] if node.module else [])])
        for alias in node.names:
            yield f"{base}.{alias.name}", alias.name


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    inside = _function_bodies(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for target, name in _targets(node, package):
            if target.split(".")[0] not in APPS:
                continue
            imported = _owner(target, modules)
            if not imported or imported == module:
                continue
            function = inside.get(id(node))
            text = " ".join(lines[node.lineno - 2 : node.end_lineno or node.lineno])
            yield Import(
                importer=module,
                imported=imported,
                name=None if target == imported else name,
                line=node.lineno,
                local=function is not None,
                allowed_local=function == "ready" or REASON in text,
            )


def all_imports() -> list[Import]:
    modules = project_modules()
    return [
        found
        for module, path in sorted(modules.items())
        for found in imports_of(module, path, modules)
    ]


def cycles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for found in imports:
        graph.setdefault(found.importer, set()).add(found.imported)
        graph.setdefault(found.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def private_imports(imports: list[Import]) -> list[Import]:
    return [
        found
        for found in imports
        if found.name and found.name.startswith("_") and not found.name.startswith("__")
    ]


def unexplained_local_imports(imports: list[Import]) -> list[Import]:
    return [
        found
        for found in imports
        if found.local
        and not found.allowed_local
        and not found.importer.startswith("bench.")
    ]


def _show(found: list[Import]) -> list[str]:
    return [f"{f.importer}:{f.line} -> {f.imported} {f.name or ''}" for f in found]


def test_no_module_imports_another_in_a_cycle() -> None:
    assert cycles(all_imports()) == []


def test_no_module_imports_a_private_name_of_another() -> None:
    assert _show(private_imports(all_imports())) == []


def test_imports_inside_functions_are_start_up_hooks_or_say_why() -> None:
    assert _show(unexplained_local_imports(all_imports())) == []


def test_the_reader_sees_every_kind_of_import() -> None:
    # The rules above are only as good as the parser: it must see relative imports,
    # names of modules and imports nested in functions, or the checks pass vacuously.
    modules = project_modules()
    found = all_imports()
    assert len(modules) > 100
    assert any(f.local and f.allowed_local for f in found)  # AppConfig.ready()
    assert any(f.name is None for f in found)  # import of a module
    assert {"library", "messaging", "jobs"} <= {f.imported.split(".")[0] for f in found}


if __name__ == "__main__":
    everything = all_imports()
    print("module cycles:", *cycles(everything), sep="\n  ")
    print("private names imported:", *_show(private_imports(everything)), sep="\n  ")
    local = unexplained_local_imports(everything)
    print(f"imports inside functions ({len(local)}):", *_show(local), sep="\n  ")
