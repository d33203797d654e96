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
import textwrap
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


# --- the code on the lesson page ----------------------------------------------------

# A definition longer than this is trimmed on the lesson page (the link shows it all).
SNIPPET_MAX_LINES = 36


@dataclass(frozen=True)
class Snippet:
    """A reference's definition as the lesson page shows it, highlighted."""

    html: str  # <pre> of highlighted lines, each with its line number
    signature: str  # the first line of the definition, plain text
    shown: int  # lines shown (elision markers not counted)
    total: int  # lines of the whole definition

    @property
    def trimmed(self) -> bool:
        return self.shown < self.total


_Def = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _header_end(node: _Def) -> int:
    """Return the last line of a definition's header: signature and docstring."""
    first = node.body[0]
    is_doc = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    if is_doc:
        return first.end_lineno or first.lineno
    return max(node.lineno, first.lineno - 1)


def _def_start(node: _Def) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def _kept_lines(source: str, total: int, limit: int) -> list[int]:
    """Return the 1-based lines of ``source`` worth showing when it is too long.

    A class keeps its header and docstring and the signature of every method (an
    outline); a function keeps its head. Either is cut at ``limit`` lines.
    """
    if total <= limit:
        return list(range(1, total + 1))
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return list(range(1, limit + 1))
    top = tree.body[0] if tree.body else None
    if isinstance(top, ast.ClassDef):
        kept = list(range(1, _header_end(top) + 1))
        for node in top.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kept += range(_def_start(node), node.body[0].lineno)
        return sorted(set(kept))[:limit]
    return list(range(1, limit + 1))


def _lines_text(count: int, what: str) -> str:
    return f"{count} {what if count == 1 else what + 's'}"


def _snippet_lines(
    rows: list[str], plain: list[str], kept: list[int], start: int
) -> tuple[str, int]:
    """Join highlighted rows with their real line numbers, marking each gap; return
    the html and the number of lines shown.

    A gap of blank lines only is shown as it is: marking it would say nothing.
    """
    out: list[str] = []
    previous = 0
    for number in kept:
        gap = range(previous + 1, number)
        if gap and all(not plain[n - 1].strip() for n in gap):
            kept_gap = list(gap)
        else:
            kept_gap = []
            if gap:
                hidden = _lines_text(len(gap), "line")
                out.append(f'<span class="elided">   ⋯ {hidden} not shown</span>')
        for line_number in [*kept_gap, number]:
            real = start + line_number - 1
            out.append(
                f'<span class="ln" aria-hidden="true">{real:>4}</span> '
                f"{rows[line_number - 1]}"
            )
        previous = number
    if kept and kept[-1] < len(rows):
        rest = _lines_text(len(rows) - kept[-1], "more line")
        out.append(f'<span class="elided">   ⋯ {rest} in the full view</span>')
    shown = sum(1 for line in out if line.startswith('<span class="ln"'))
    return "\n".join(out), shown


@lru_cache(maxsize=256)
def _snippet(ref: str, path: Path, mtime_ns: int, start: int, end: int) -> Snippet:
    lines = path.read_text(encoding="utf-8").splitlines()[start - 1 : end]
    source = "\n".join(lines) + "\n"
    lexer = get_lexer_for_filename(path.name, stripnl=False)
    rows = highlight(source, lexer, HtmlFormatter(nowrap=True)).split("\n")
    kept = _kept_lines(source, len(lines), SNIPPET_MAX_LINES)
    body, shown = _snippet_lines(rows[: len(lines)], lines, kept, start)
    signature = next(
        (
            line.strip()
            for line in lines
            if line.strip() and not line.lstrip().startswith("@")
        ),
        ref,
    )
    return Snippet(
        html=f'<pre class="highlight code-snippet"><code>{body}</code></pre>',
        signature=signature,
        shown=shown,
        total=len(lines),
    )


def ref_snippet(ref: str) -> Snippet:
    """Return the highlighted definition ``ref`` names, trimmed when long.

    Read from the file at render time (cached per process and file modification
    time), so the page shows the code as it is, not as the lesson was written.
    A module shows its docstring. Raise RefError when the reference does not resolve.
    """
    target = ref_resolve(ref)
    path = ROOT / target.path
    start, end = target.start, target.end
    if start == end == 1 and path.suffix == ".py":
        start, end = _module_doc_lines(path)
    return _snippet(ref, path, path.stat().st_mtime_ns, start, end)


def _module_doc_lines(path: Path) -> tuple[int, int]:
    """Return the lines of a module's docstring (its first line if it has none)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    first = tree.body[0] if tree.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return first.lineno, first.end_lineno or first.lineno
    return 1, 1
