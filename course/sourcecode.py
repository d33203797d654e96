"""Lessons' links into this repository: dotted references and a read-only source view.

A lesson names the real code that does what it teaches by dotted path
(``messaging.services.claim.deliveries_claim``). ``ref_resolve`` turns that into a file
of this repository and a line range; ``source_render`` shows such a file highlighted by
Pygments with an anchor per line. Only files under the project's own code folders, with
a source suffix, are ever read, so the view cannot be walked to settings, the database
or anything outside the repository.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_for_filename
from pygments.util import ClassNotFound

ROOT = Path(__file__).resolve().parent.parent
# The folders a learner may read, and the kinds of file in them.
SOURCE_DIRS = frozenset(
    {"library", "messaging", "realtime", "jobs", "course", "config", "templates"}
    | {"static", "bench", "scripts"}
)
SOURCE_SUFFIXES = frozenset({".py", ".html", ".js", ".css", ".md", ".svg"})
MAX_SOURCE_BYTES = 400_000


class RefError(Exception):
    """A dotted reference that does not name code of this repository."""


@dataclass(frozen=True)
class CodeRef:
    ref: str
    path: str  # relative to the repository, with forward slashes
    start: int
    end: int

    @property
    def anchor(self) -> str:
        return f"L-{self.start}"


def source_path_allowed(relative: str) -> Path | None:
    """Return the absolute path of a repository file a learner may read, or None."""
    if not relative or "\\" in relative or "\x00" in relative:
        return None
    parts = relative.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return None
    if parts[0] not in SOURCE_DIRS:
        return None
    candidate = (ROOT / relative).resolve()
    try:
        candidate.relative_to(ROOT)
    except ValueError:
        return None  # a symlink pointing out of the repository
    if candidate.suffix not in SOURCE_SUFFIXES or not candidate.is_file():
        return None
    return candidate


def _module_prefix(ref: str) -> tuple[ModuleType, list[str]]:
    parts = ref.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            # Only "this prefix is not a module" moves on; a broken import is a bug.
            if error.name is not None and not name.startswith(error.name):
                raise
            continue
        return module, parts[cut:]
    raise RefError(f"{ref}: no importable module in it")


def _relative_file(obj: object, ref: str) -> Path:
    try:
        filename = inspect.getsourcefile(obj)  # type: ignore[arg-type]
    except TypeError:
        filename = None
    if filename is None:
        raise RefError(f"{ref}: has no source file")
    path = Path(filename).resolve()
    try:
        relative = path.relative_to(ROOT)
    except ValueError:
        raise RefError(f"{ref}: is not code of this repository") from None
    if source_path_allowed(relative.as_posix()) is None:
        raise RefError(f"{ref}: {relative} is not in a readable folder")
    return path


def _assignment_lines(path: Path, owner: list[str], name: str) -> tuple[int, int]:
    """Find ``name = …`` at module level or inside the classes ``owner``."""
    body: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for class_name in owner:
        found = [
            node
            for node in body
            if isinstance(node, ast.ClassDef) and node.name == class_name
        ]
        if not found:
            return 0, 0
        body = found[0].body
    for node in body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node.lineno, node.end_lineno or node.lineno
    return 0, 0


@lru_cache(maxsize=512)
def ref_resolve(ref: str) -> CodeRef:
    """Return the file and lines of a dotted reference; raise RefError if it moved."""
    module, rest = _module_prefix(ref)
    obj: object = module
    owners: list[str] = []
    for index, attribute in enumerate(rest):
        if not hasattr(obj, attribute):
            raise RefError(f"{ref}: {attribute!r} not found")
        parent, obj = obj, getattr(obj, attribute)
        static = inspect.getattr_static(parent, attribute)
        if isinstance(static, property) and static.fget is not None:
            obj = static.fget
        elif isinstance(static, staticmethod | classmethod):
            obj = static.__func__
        if index == len(rest) - 1 and not (
            inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)
        ):
            # A constant: find its assignment in the owner's source.
            path = _relative_file(module, ref)
            start, end = _assignment_lines(path, owners, attribute)
            if not start:
                raise RefError(f"{ref}: no assignment of {attribute!r} found")
            return CodeRef(ref, path.relative_to(ROOT).as_posix(), start, end)
        if inspect.isclass(obj) and parent is not module:
            owners.append(attribute)
        elif inspect.isclass(obj):
            owners = [attribute]
    target = inspect.unwrap(obj) if callable(obj) else obj
    path = _relative_file(target, ref)
    if inspect.ismodule(target):
        return CodeRef(ref, path.relative_to(ROOT).as_posix(), 1, 1)
    lines, start = inspect.getsourcelines(target)  # type: ignore[arg-type]
    return CodeRef(
        ref, path.relative_to(ROOT).as_posix(), start, start + len(lines) - 1
    )


@dataclass(frozen=True)
class SourcePage:
    path: str
    html: str
    lines: int
    css: str


@lru_cache(maxsize=64)
def _render(path: Path, mtime_ns: int, start: int, end: int) -> SourcePage:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        lexer = get_lexer_for_filename(path.name, stripnl=False)
    except ClassNotFound:
        lexer = get_lexer_for_filename("x.txt", stripnl=False)
    highlighted = list(range(start, end + 1)) if start else []
    formatter = HtmlFormatter(
        linenos="table",
        lineanchors="L",
        anchorlinenos=True,
        hl_lines=highlighted,
        cssclass="source",
    )
    return SourcePage(
        path=path.relative_to(ROOT).as_posix(),
        html=highlight(text, lexer, formatter),
        lines=text.count("\n") + 1,
        css=formatter.get_style_defs(".source"),  # type: ignore[no-untyped-call]
    )


def source_render(relative: str, *, start: int = 0, end: int = 0) -> SourcePage | None:
    """Return the file highlighted, ``start``-``end`` marked; None if unreadable."""
    path = source_path_allowed(relative)
    if path is None:
        return None
    stat = path.stat()
    if stat.st_size > MAX_SOURCE_BYTES:
        return None
    if start < 0 or end < start or end - start > 2000:
        start = end = 0
    return _render(path, stat.st_mtime_ns, start, end)
