"""Lesson texts: read ``course/content/<slug>.md``, fill in the model's numbers, render.

A lesson file is a TOML block between ``+++`` lines (what to predict, the column notes,
the parameter notes, code references, links, questions) and a Markdown body; see
``course/AUTHORING.md``. The body never holds a number the lab produces: it writes
``{{table[row].column}}`` and this module puts in the model's value for the default
parameters, and ``[[table:NAME]]`` / ``[[diagram:NAME]]`` lines become the model's table
and a figure. Markdown is rendered by markdown-it-py with raw HTML off, code highlighted
by Pygments, and the result passed through nh3 before our own trusted fragments (tables,
figures) are put in, so a lesson file cannot inject markup.

The rendered lesson is cached per process and file modification time: a page view costs
no query and no model run once warm.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
import shutil
import threading
import time
import tomllib
import xml.etree.ElementTree as ElementTree
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import nh3
from django.conf import settings
from django.templatetags.static import static
from markdown_it import MarkdownIt
from mdit_py_plugins.anchors import anchors_plugin
from mdit_py_plugins.container import container_plugin
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from course.labs.harness.base import Cell, Lab, LabError, Params, Table, Tables
from course.labs.registry import lab_get

CONTENT_DIR = Path(__file__).resolve().parent / "content"
DIAGRAM_DIR = Path(__file__).resolve().parent / "static" / "course" / "diagrams"
DIAGRAM_STATIC = "course/diagrams/{name}.svg"
WORDS_PER_MINUTE = 220
MIN_WORDS = 1200

# {{table[row].column}}, or with changed parameters, run by the model for the text:
# {{table[row].column@requests=900,capacities=4;8}} (a list's values joined by ";").
_VALUE = re.compile(
    r"\{\{\s*([a-z0-9_]+)\[([^\]]+)\]\.([a-z0-9_]+)(?:@([^}]*))?\s*\}\}"
)
_PARAM = re.compile(r"\{\{\s*param:([a-z0-9_]+)\s*\}\}")
# {{site}}: the address the page was served from (scheme, host and port), as in a
# `curl` line the learner copies. The cached text holds a plain word in its place
# (Markdown, nh3 and Pygments leave it whole); site_fill puts the request's in.
SITE = "{{site}}"
_SITE_MARK = "librarylabsiteaddress"
_BLOCK = re.compile(r"<p>\[\[(table|diagram):([a-z0-9_-]+)\]\]</p>")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\u2019-]*")
_NUM = ' class="num"'
_SVG_NS = "{http://www.w3.org/2000/svg}"

_ALLOWED_ATTRIBUTES = {
    "*": {"class", "id"},
    "a": {"href", "title"},
    "th": {"scope"},
    "td": {"style"},
    "code": {"class"},
}


class LessonTextError(Exception):
    """A lesson file that does not follow ``course/AUTHORING.md``."""


@dataclass(frozen=True)
class Heading:
    level: int
    anchor: str
    text: str


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    explanation: str


@dataclass(frozen=True)
class Breakdown:
    """Which cells of a run the predicted figure is made of, and how.

    Shown when a prediction misses: the run's own values of ``columns`` in ``row``
    of ``table`` (model and live), with ``text`` saying how they add up.
    """

    text: str
    table: str
    row: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Predict:
    prompt: str
    table: str
    row: str
    column: str
    unit: str = ""
    # Blocks of the body that give the answer away: "table:NAME", "diagram:NAME".
    reveals: tuple[str, ...] = ()
    # Phrases (or "table:NAME", "diagram:NAME") where the predicted number stands
    # for something else, so lesson_check does not count them as giving it away.
    unrelated: tuple[str, ...] = ()
    breakdown: Breakdown | None = None


@dataclass(frozen=True)
class CodeLink:
    ref: str
    text: str


@dataclass(frozen=True)
class SeeLink:
    url: str
    args: tuple[Any, ...]
    label: str
    text: str


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    desc: str


@dataclass(frozen=True)
class LessonText:
    slug: str
    html: str
    toc: tuple[Heading, ...]
    words: int
    predict: Predict | None
    columns: dict[str, dict[str, str]]
    params: dict[str, str]
    live: str
    # Per live table (its model name) and column: why live and model may differ.
    live_columns: dict[str, dict[str, str]]
    # Per live table (its model name): live column -> the model column it measures
    # under another name ([live.compare.NAME]); same names pair by themselves.
    live_compare: dict[str, dict[str, str]]
    code: tuple[CodeLink, ...]
    see: tuple[SeeLink, ...]
    questions: tuple[Question, ...]
    tables: tuple[str, ...]
    figures: tuple[Figure, ...]
    # The body with the parts that give the prediction away opened (a learner who
    # predicted, or chose to see them); ``html`` has them closed.
    html_revealed: str = ""
    # Blocks held back until the prediction: "table:NAME", "diagram:NAME".
    held: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())

    @property
    def reading_minutes(self) -> int:
        return max(1, math.ceil(self.words / WORDS_PER_MINUTE))


# --- the model's numbers -----------------------------------------------------------


@lru_cache(maxsize=32)
def default_tables(slug: str) -> Tables:
    """Return the lab's model tables with the default parameters (deterministic)."""
    lab = lab_get(slug)
    return model_tables(lab, lab.defaults())


@lru_cache(maxsize=128)
def changed_tables(slug: str, changes: str) -> Tables:
    """Return the model's tables with the parameters ``changes`` names changed.

    ``changes`` is ``name=value,name=value`` as a placeholder writes it, a list's
    values joined by ``;``. Raise KeyError naming what does not parse.
    """
    lab = lab_get(slug)
    overrides: dict[str, str] = {}
    for part in changes.split(","):
        name, sep, text = part.strip().partition("=")
        if not sep:
            raise KeyError(f"{part.strip()!r} is not name=value")
        overrides[name.strip()] = text.strip().replace(";", ",")
    try:
        params = lab.resolve(overrides)
    except LabError as error:
        raise KeyError(str(error)) from None
    return model_tables(lab, params)


def model_tables(lab: Lab[Any], params: Params) -> Tables:
    """Return the model's tables for ``params``, from the disk cache when it has them.

    A model's result depends only on its parameters and on the labs' code, so it is
    kept under ``var/cache/models/<digest of the labs' code>/``: every process (web,
    workers, tests) renders a lesson from the first one's runs, and a lesson whose
    text asks for runs with changed parameters (seconds of simulation for the
    queueing labs) costs them once per version of the code, not once per process.
    The latest runs are also kept in this process (``MODEL_MEMORY_SIZE``), so the
    explorable lesson page (``course.explore``) answers a parameter set it has seen
    without reading a file.
    """
    return model_tables_from(lab, params)[0]


# Where a parameter set's tables came from: this process, the disk, or a model run.
MEMORY, DISK, RUN = "memory", "disk", "run"
MODEL_MEMORY_SIZE = 256
_MODEL_KEY = re.compile(r"[0-9a-f]{24}")
_memory: OrderedDict[str, Tables] = OrderedDict()
_memory_lock = threading.Lock()


def model_key(lab: Lab[Any], params: Params) -> str:
    """Return the digest naming a parameter set of ``lab`` (its cache file's name)."""
    return hashlib.sha256(
        json.dumps({"lab": lab.slug, "params": params}, sort_keys=True).encode()
    ).hexdigest()[:24]


def model_key_valid(key: str) -> bool:
    return _MODEL_KEY.fullmatch(key) is not None


def model_tables_from(lab: Lab[Any], params: Params) -> tuple[Tables, str]:
    """Return the model's tables for ``params`` and where they came from."""
    key = model_key(lab, params)
    kept = model_tables_kept(lab, key)
    if kept is not None:
        return kept
    tables = lab.run(params)["tables"]
    model_tables_keep(lab, key, tables)
    return tables, RUN


def model_tables_keep(
    lab: Lab[Any], key: str, tables: Tables, *, disk: bool = True
) -> None:
    """Keep a run's tables under ``key``: in this process, and on disk with ``disk``
    (a run made elsewhere, e.g. ``course.model_pool``'s workers)."""
    path = _model_path(lab, key)
    if disk:
        _write_atomically(path, json.dumps(tables))
    _remember(path, tables)


def model_tables_kept(lab: Lab[Any], key: str) -> tuple[Tables, str] | None:
    """Return the tables kept under ``key`` (``model_key``) and where, without
    running the model: None when neither this process nor the disk has them (or
    ``key`` is not a digest: it may come from a request)."""
    found = model_tables_in_memory(lab, key)
    if found is not None:
        return found, MEMORY
    if not model_key_valid(key):
        return None
    path = _model_path(lab, key)
    try:
        cached: Tables = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    _remember(path, cached)
    return cached, DISK


def model_tables_in_memory(lab: Lab[Any], key: str) -> Tables | None:
    """Return the tables this process keeps under ``key``, or None: no I/O, so an
    event loop may ask."""
    if not model_key_valid(key):
        return None
    path = str(_model_path(lab, key))
    with _memory_lock:
        found = _memory.get(path)
        if found is not None:
            _memory.move_to_end(path)
        return found


def _model_path(lab: Lab[Any], key: str) -> Path:
    return model_cache_dir() / f"{lab.slug}-{key}.json"


def _remember(path: Path, tables: Tables) -> None:
    with _memory_lock:
        _memory[str(path)] = tables
        _memory.move_to_end(str(path))
        while len(_memory) > MODEL_MEMORY_SIZE:
            _memory.popitem(last=False)


@lru_cache(maxsize=1)
def model_cache_dir() -> Path:
    """Return this code's folder of cached model runs (a digest of course/labs)."""
    digest = hashlib.sha256()
    labs = Path(__file__).resolve().parent / "labs"
    for source in sorted(labs.rglob("*.py")):
        digest.update(str(source.relative_to(labs)).encode())
        digest.update(source.read_bytes())
    return Path(settings.VAR_DIR) / "cache" / "models" / digest.hexdigest()[:16]


# A writer's temporary file older than this belongs to a process that died mid-write.
_TEMPORARY_STALE_S = 3600


def model_cache_sweep(max_bytes: int | None = None, now: float | None = None) -> int:
    """Bound the disk cache of model runs; return how many files went.

    The folders of other versions of the labs' code are never read again, so they
    go whole. In this version's folder the explorable pages add a file per new
    parameter set a learner tries: past ``max_bytes`` (``LAB_MODEL_CACHE_MAX_MB``)
    the least recently written go first. A file that went is only a model run to
    make again, so the sweep never needs to be exact, only to keep the disk bounded.
    """
    limit = settings.LAB_MODEL_CACHE_MAX_MB * 2**20 if max_bytes is None else max_bytes
    now = time.time() if now is None else now
    current = model_cache_dir()
    removed = 0
    for folder in current.parent.glob("*"):
        if folder.is_dir() and folder != current:
            removed += sum(1 for _ in folder.glob("*"))
            shutil.rmtree(folder, ignore_errors=True)
    files: list[tuple[float, int, Path]] = []
    for path in current.glob("*"):
        try:
            stat = path.stat()
        except OSError:
            continue  # renamed or removed meanwhile
        if path.name.endswith(".tmp"):
            if now - stat.st_mtime > _TEMPORARY_STALE_S:
                path.unlink(missing_ok=True)
                removed += 1
            continue
        files.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        path.unlink(missing_ok=True)
        total -= size
        removed += 1
    return removed


def _write_atomically(path: Path, text: str) -> None:
    # Several processes may render the same lesson at once: each writes its own
    # file and renames it into place, so a reader sees a whole file or none.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(
            f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        )
        temporary.write_text(text)
        temporary.replace(path)
    except OSError:
        pass  # a read-only var: the run is simply not kept


def row_index(table: Table, key: str) -> int | None:
    """Return the index of the row named ``key`` (its first cell) or ``#n``."""
    if key.startswith("#"):
        try:
            index = int(key[1:])
        except ValueError:
            return None
        return index if 0 <= index < len(table["rows"]) else None
    for index, row in enumerate(table["rows"]):
        if row and str(row[0]) == key:
            return index
    return None


def table_cell(tables: Tables, name: str, row: str, column: str) -> Cell:
    """Return one cell; raise KeyError with a readable reason when it is not there."""
    if name not in tables:
        raise KeyError(f"no table {name!r}")
    table = tables[name]
    if column not in table["columns"]:
        raise KeyError(f"table {name!r} has no column {column!r}")
    index = row_index(table, row)
    if index is None:
        raise KeyError(f"table {name!r} has no row {row!r}")
    return table["rows"][index][table["columns"].index(column)]


def cell_text(value: Cell) -> str:
    """Return a cell as prose prints it: thousands separated, NaN as a dash."""
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,}"
    return value


# --- parsing -----------------------------------------------------------------------


_FRONT = re.compile(r"\A\+\+\+\n(.*?)^\+\+\+\n", re.DOTALL | re.MULTILINE)


def _split(text: str, slug: str) -> tuple[dict[str, Any], str]:
    match = _FRONT.match(text)
    if match is None:
        raise LessonTextError(f"{slug}: the file must start with a +++ TOML block")
    try:
        meta = tomllib.loads(match.group(1))
    except tomllib.TOMLDecodeError as error:
        raise LessonTextError(f"{slug}: front matter: {error}") from None
    return meta, text[match.end() :]


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _strings(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(_text(item) for item in raw if _text(item))


def _breakdown(raw: object, table: str, row: str) -> Breakdown | None:
    if not isinstance(raw, dict):
        return None
    return Breakdown(
        text=_text(raw.get("text")),
        table=_text(raw.get("table")) or table,
        row=_text(raw.get("row")) or row,
        columns=_strings(raw.get("columns")),
    )


def _predict(
    meta: dict[str, Any], tables: Tables, lab: Lab[Any], problems: list[str]
) -> Predict | None:
    raw = meta.get("predict")
    if not isinstance(raw, dict):
        return None
    table, row = _text(raw.get("table")), _text(raw.get("row"))
    return Predict(
        prompt=placeholders_fill(_text(raw.get("prompt")), tables, lab, problems),
        table=table,
        row=row,
        column=_text(raw.get("column")),
        unit=_text(raw.get("unit")),
        reveals=_strings(raw.get("reveals")),
        unrelated=tuple(
            placeholders_fill(phrase, tables, lab, problems)
            for phrase in _strings(raw.get("unrelated"))
        ),
        breakdown=_breakdown(raw.get("breakdown"), table, row),
    )


def _str_map(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): _text(v) for k, v in raw.items()}


def _entries(meta: dict[str, Any], name: str) -> list[dict[str, Any]]:
    raw = meta.get(name, [])
    return (
        [item for item in raw if isinstance(item, dict)]
        if isinstance(raw, list)
        else []
    )


# --- rendering ---------------------------------------------------------------------


def _highlight(code: str, language: str, _attrs: str) -> str:
    try:
        lexer = get_lexer_by_name(language or "text")
    except ClassNotFound:
        lexer = get_lexer_by_name("text")
    # markdown-it keeps output that starts with <pre> as it is (no second wrapper).
    body = highlight(code, lexer, HtmlFormatter(nowrap=True))
    return f'<pre class="highlight"><code>{body}</code></pre>\n'


# "::: answer" ... ":::" marks prose that gives the predicted figure away. markdown-it
# renders it as this <aside> (raw HTML is off, so a lesson cannot write one itself);
# after nh3 it becomes a <details> held closed until the learner predicts.
HOLD_CONTAINER = "answer"
_HOLD_ASIDE_OPEN = '<aside class="answer-hold">'
_HOLD_ASIDE_CLOSE = "</aside>"
_HOLD_OPEN = '<details class="answer-hold" data-answer-hold>'
_HOLD_OPEN_REVEALED = '<details class="answer-hold is-revealed" data-answer-hold open>'


def _hold_render(
    _renderer: object, tokens: list[Any], index: int, _options: object, _env: object
) -> str:
    return _HOLD_ASIDE_OPEN + "\n" if tokens[index].nesting == 1 else "</aside>\n"


def _hold_start(what: str) -> str:
    """Open a held-back block: closed, its summary saying what it holds and why."""
    return (
        f"{_HOLD_OPEN}<summary>"
        '<span class="answer-hold-title">Held back until you predict</span> '
        f'<span class="answer-hold-what">{what} gives away the figure the lab asks '
        "you to predict. Predict first, or open it here.</span></summary>"
        '<div class="answer-hold-body">'
    )


_HOLD_END = "</div></details>"


def _held(what: str, inner: str) -> str:
    return f"{_hold_start(what)}{inner}{_HOLD_END}"


def _hold_spans(rendered: str, problems: list[str]) -> list[tuple[int, int]]:
    """Return the (start, end) offsets of every "::: answer" block, unnested."""
    spans: list[tuple[int, int]] = []
    position = 0
    while (start := rendered.find(_HOLD_ASIDE_OPEN, position)) >= 0:
        end = rendered.find(_HOLD_ASIDE_CLOSE, start)
        if end < 0:
            problems.append("::: answer: a block that never ends")
            break
        if rendered.find(_HOLD_ASIDE_OPEN, start + 1, end) >= 0:
            problems.append("::: answer: blocks cannot be nested")
        spans.append((start, end + len(_HOLD_ASIDE_CLOSE)))
        position = end + len(_HOLD_ASIDE_CLOSE)
    return spans


def _markdown() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark", {"html": False, "highlight": _highlight, "typographer": True}
    )
    md.enable(["table", "strikethrough", "replacements", "smartquotes"])
    anchors_plugin(md, min_level=2, max_level=3, permalink=True, permalinkSymbol="#")
    container_plugin(md, HOLD_CONTAINER, render=_hold_render)
    return md


_MD = _markdown()


def placeholders_fill(
    body: str, tables: Tables, lab: Lab[Any], problems: list[str]
) -> str:
    """Fill in the model's values for ``{{table[row].column}}`` (with ``@changes``:
    from a model run with those parameters) and ``{{param:x}}``."""

    def value(match: re.Match[str]) -> str:
        name, row, column, changes = match.groups()
        try:
            source = tables
            if changes:
                source = changed_tables(lab.slug, changes.strip())
            return cell_text(table_cell(source, name, row.strip(), column))
        except KeyError as error:
            problems.append(f"{match.group(0)}: {error.args[0]}")
            return "?"

    def param(match: re.Match[str]) -> str:
        name = match.group(1)
        try:
            default = lab.param(name).default
        except Exception:
            problems.append(f"{match.group(0)}: no such parameter")
            return "?"
        return lab.param(name).text(default)

    return _PARAM.sub(param, _VALUE.sub(value, body))


def _anchors_named(rendered: str, toc: tuple[Heading, ...]) -> str:
    """Name each heading's "#" link for a screen reader: "Link to this section: …"."""
    for heading in toc:
        link = f'<a class="header-anchor" href="#{html.escape(heading.anchor)}"'
        label = html.escape(f"Link to this section: {heading.text}")
        rendered = rendered.replace(link, f'{link} aria-label="{label}"', 1)
    return rendered


def _toc(tokens: list[Any]) -> tuple[Heading, ...]:
    headings: list[Heading] = []
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag in ("h2", "h3"):
            inline = tokens[index + 1]
            text = "".join(
                child.content for child in inline.children or [] if child.type == "text"
            )
            headings.append(
                Heading(int(token.tag[1]), str(token.attrs.get("id", "")), text.strip())
            )
    return tuple(headings)


def prose_words(body: str) -> int:
    """Count the words a learner reads: no code blocks, no markers, no front matter."""
    without_code = re.sub(r"```.*?```", " ", body, flags=re.DOTALL)
    without_markers = re.sub(r"\[\[[^\]]*\]\]|\{\{[^}]*\}\}", " x ", without_code)
    return len(_WORD.findall(without_markers))


def diagram_read(name: str) -> Figure | None:
    """Return a diagram's caption and description from its SVG, or None if missing."""
    path = DIAGRAM_DIR / f"{name}.svg"
    if not path.is_file():
        return None
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError:
        return None
    title = root.find(f"{_SVG_NS}title")
    desc = root.find(f"{_SVG_NS}desc")
    return Figure(
        name=name,
        title=" ".join((title.text or "").split()) if title is not None else "",
        desc=" ".join((desc.text or "").split()) if desc is not None else "",
    )


def _table_html(name: str, table: Table, notes: dict[str, str]) -> str:
    numeric = [
        bool(table["rows"])
        and all(
            row[i] is None or isinstance(row[i], int | float) for row in table["rows"]
        )
        for i in range(len(table["columns"]))
    ]
    head = "".join(
        f'<th scope="col"{_NUM if numeric[i] else ""}>{html.escape(c)}</th>'
        for i, c in enumerate(table["columns"])
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{_NUM if numeric[i] else ''}>{html.escape(cell_text(cell))}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in table["rows"]
    )
    explained = "".join(
        f"<dt><code>{html.escape(c)}</code></dt><dd>{html.escape(notes[c])}</dd>"
        for c in table["columns"]
        if notes.get(c)
    )
    return (
        f'<figure class="published-table" data-table="{html.escape(name)}">'
        f"<figcaption><code>{html.escape(name)}</code> · the model with the default "
        f"parameters</figcaption>"
        f'<div class="table-wrap"><table class="data"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
        + (f'<dl class="column-notes">{explained}</dl>' if explained else "")
        + "</figure>"
    )


def _figure_html(figure: Figure, static_url: str) -> str:
    return (
        f'<figure class="diagram" data-diagram="{html.escape(figure.name)}">'
        f'<a class="diagram-zoom" href="{html.escape(static_url)}" '
        'title="Open the diagram full size">'
        f'<img src="{html.escape(static_url)}" '
        f'alt="{html.escape(figure.desc)}" loading="lazy" decoding="async"></a>'
        f"<figcaption>{html.escape(figure.title)}</figcaption></figure>"
    )


def _blocks(
    rendered: str,
    tables: Tables,
    columns: dict[str, dict[str, str]],
    reveals: tuple[str, ...],
    problems: list[str],
) -> tuple[str, list[str], list[Figure], list[str]]:
    """Put in the tables and figures, and hold back what gives the answer away.

    A block inside "::: answer" is held with the prose around it; one that
    ``reveals`` names is held on its own. Return the html, the tables and figures
    shown, and the blocks held ("table:NAME", "diagram:NAME").
    """
    shown: list[str] = []
    figures: list[Figure] = []
    held: list[str] = []
    spans = _hold_spans(rendered, problems)

    def inside(position: int) -> bool:
        return any(start <= position < end for start, end in spans)

    def block(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind == "table":
            if name not in tables:
                problems.append(f"[[table:{name}]]: the model has no table {name!r}")
                return ""
            shown.append(name)
            out = _table_html(name, tables[name], columns.get(name, {}))
            what = f"The table <code>{html.escape(name)}</code>"
        else:
            figure = diagram_read(name)
            if figure is None:
                problems.append(
                    f"[[diagram:{name}]]: no readable {name}.svg in {DIAGRAM_DIR}"
                )
                return ""
            figures.append(figure)
            out = _figure_html(figure, static(DIAGRAM_STATIC.format(name=name)))
            what = "This diagram"
        marker = f"{kind}:{name}"
        if inside(match.start()):
            held.append(marker)
        elif marker in reveals:
            held.append(marker)
            out = _held(what, out)
        return out

    final = _BLOCK.sub(block, rendered)
    for marker in reveals:
        if marker not in held:
            problems.append(f"[predict] reveals {marker!r}: no such block in the body")
    final = final.replace(_HOLD_ASIDE_OPEN, _hold_start("This passage")).replace(
        _HOLD_ASIDE_CLOSE, _HOLD_END
    )
    return _holds_merged(final), shown, figures, held


# A held block right after another: one fold for both, so the page does not stack
# two "held back" bars (a table held by ``reveals`` and the sentence reading it).
_HOLD_PAIR = re.compile(
    re.escape(_HOLD_END) + r"\s*" + re.escape(_HOLD_OPEN) + r"<summary>.*?</summary>"
    r'<div class="answer-hold-body">',
    re.DOTALL,
)
_HOLD_WHAT = re.compile(r'(<span class="answer-hold-what">).*?( gives away)')


def _holds_merged(rendered: str) -> str:
    parts = _HOLD_PAIR.split(rendered)
    if len(parts) == 1:
        return rendered
    merged = parts[0]
    for part in parts[1:]:
        # The fold now holds more than one kind of block: name it plainly.
        start = merged.rfind(_HOLD_OPEN)
        merged = merged[:start] + _HOLD_WHAT.sub(
            r"\1This part\2", merged[start:], count=1
        )
        merged += "\n" + part
    return merged


def _live_map(raw: object, part: str) -> dict[str, dict[str, str]]:
    """Return ``[live.<part>.NAME]`` tables as {NAME: {column: text}}."""
    found = raw.get(part, {}) if isinstance(raw, dict) else {}
    if not isinstance(found, dict):
        return {}
    return {str(name): _str_map(notes) for name, notes in found.items()}


def _load(slug: str, text: str) -> LessonText:
    meta, body = _split(text, slug)
    lab = lab_get(slug)
    tables = default_tables(slug)
    problems: list[str] = []
    filled = placeholders_fill(body.replace(SITE, _SITE_MARK), tables, lab, problems)
    tokens = _MD.parse(filled)
    rendered = _MD.renderer.render(tokens, _MD.options, {})
    clean = nh3.clean(
        rendered,
        attributes=_ALLOWED_ATTRIBUTES,
        link_rel="noopener noreferrer",
        url_schemes={"http", "https", "mailto"},
    )
    toc = _toc(tokens)
    clean = _anchors_named(clean, toc)
    # A Markdown table wider than a phone scrolls in its own box, not the page.
    clean = clean.replace("<table>", '<div class="table-wrap"><table>').replace(
        "</table>", "</table></div>"
    )
    columns = {
        str(name): _str_map(notes)
        for name, notes in dict(meta.get("columns", {})).items()
    }
    predict = _predict(meta, tables, lab, problems)
    final, shown, figures, held = _blocks(
        clean, tables, columns, predict.reveals if predict else (), problems
    )
    return LessonText(
        slug=slug,
        html=final,
        toc=toc,
        words=prose_words(body),
        predict=predict,
        columns=columns,
        params=_str_map(meta.get("params")),
        live=_text(dict(meta.get("live", {})).get("text")),
        live_columns=_live_map(meta.get("live"), "columns"),
        live_compare=_live_map(meta.get("live"), "compare"),
        code=tuple(
            CodeLink(_text(e.get("ref")), _text(e.get("text")))
            for e in _entries(meta, "code")
        ),
        see=tuple(
            SeeLink(
                _text(e.get("url")),
                tuple(e.get("args", []) or []),
                _text(e.get("label")),
                _text(e.get("text")),
            )
            for e in _entries(meta, "see")
        ),
        questions=tuple(
            Question(
                *(
                    placeholders_fill(_text(e.get(part)), tables, lab, problems)
                    for part in ("question", "answer", "explanation")
                )
            )
            for e in _entries(meta, "questions")
        ),
        tables=tuple(shown),
        figures=tuple(figures),
        html_revealed=final.replace(_HOLD_OPEN, _HOLD_OPEN_REVEALED),
        held=tuple(held),
        problems=tuple(problems),
    )


@lru_cache(maxsize=64)
def _cached(slug: str, mtime_ns: int) -> LessonText:
    path = CONTENT_DIR / f"{slug}.md"
    return _load(slug, path.read_text(encoding="utf-8"))


def site_fill(text: LessonText, origin: str) -> LessonText:
    """Return ``text`` with ``{{site}}`` read as ``origin`` ("http://host:port")."""
    if _SITE_MARK not in text.html:
        return text
    return replace(text, html=text.html.replace(_SITE_MARK, html.escape(origin)))


@dataclass(frozen=True)
class Outline:
    """What the course index needs of a lesson, read without rendering it."""

    words: int
    questions: int

    @property
    def reading_minutes(self) -> int:
        return max(1, math.ceil(self.words / WORDS_PER_MINUTE))


@lru_cache(maxsize=64)
def _outline(slug: str, mtime_ns: int) -> Outline:
    path = CONTENT_DIR / f"{slug}.md"
    meta, body = _split(path.read_text(encoding="utf-8"), slug)
    return Outline(prose_words(body), len(_entries(meta, "questions")))


def lesson_outline(slug: str) -> Outline | None:
    """Return the lesson's words and question count, without running its lab.

    The course index and the account page list all 25 lessons: rendering each (its
    model runs, its code) would make the first of those pages wait for all of them.
    """
    path = CONTENT_DIR / f"{slug}.md"
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        return None
    return _outline(slug, mtime)


def lesson_text(slug: str) -> LessonText | None:
    """Return the rendered lesson ``slug``, or None when it has no text file."""
    path = CONTENT_DIR / f"{slug}.md"
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        return None
    return _cached(slug, mtime)
