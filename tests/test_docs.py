"""What the docs cite resolves: relative links, file paths and dotted names.

Read from the README, ``docs/*.md``, ``bench/README.md``, ``course/AUTHORING.md`` and
``course/PARAMETERS.md``, outside fenced code blocks (commands are examples, not
citations):

- a Markdown link or image to a relative target names a file or folder of the
  repository, and its ``#anchor``, when given, a heading of that Markdown file
  (GitHub's anchor rules);
- a code span with a slash whose first segment is a top-level folder of the
  repository is a path, and exists. Spans with a placeholder (``<slug>``, ``*``,
  ``…``, or a missing name in capitals: ``NAME.svg``) are patterns, and ``var/``
  holds what a run writes, not what a clone has;
- a code span that is a dotted name rooted in one of the project's packages
  resolves as a lesson's code reference does (``course.sourcecode.ref_resolve``),
  unless it is a permission (``library.issue_loan``) or a system check id
  (``messaging.E001``).

It also keeps the table of labs in ``docs/labs.md`` equal to the registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.apps import apps

from course.labs.registry import LABS
from course.lessons import lesson_get
from course.sourcecode import RefError, ref_resolve
from course.textbook import default_tables

ROOT = Path(__file__).resolve().parent.parent
DOCS = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "bench" / "README.md",
    ROOT / "course" / "AUTHORING.md",
    ROOT / "course" / "PARAMETERS.md",
)
PACKAGES = frozenset(
    {"bench", "config", "course", "jobs", "library", "messaging", "realtime", "tests"}
)
# What a run writes under these is cited too, but a clone does not hold it.
RUNTIME_PREFIXES = ("var/",)
PLACEHOLDER = re.compile(r"[<>*…{}$?=:\s]")
# A name in capitals (SLUG, NAME.svg) stands for one when no such file exists.
CAPITALS = re.compile(r"(?:^|/)[A-Z][A-Z0-9_]*(?:\.[a-z]+)?(?:/|$)")
FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOTTED = re.compile(r"[a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
CHECK_ID = re.compile(r"[a-z_]+\.[EWC]\d{3}")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Cited:
    doc: Path
    line: int
    text: str

    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}: {self.text}"


def prose_lines(doc: Path) -> Iterator[tuple[int, str]]:
    """Yield the numbered lines of ``doc`` outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def code_spans(doc: Path) -> Iterator[Cited]:
    for number, line in prose_lines(doc):
        for match in CODE_SPAN.finditer(line):
            yield Cited(doc, number, match.group(2).strip())


def links(doc: Path) -> Iterator[Cited]:
    for number, line in prose_lines(doc):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            yield Cited(doc, number, match.group(1))


def anchor_of(heading: str) -> str:
    """Return GitHub's anchor of a heading's text (before duplicate numbering)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """Return every heading anchor of ``doc``, duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(doc):
        match = HEADING.match(line)
        if match is None:
            continue
        anchor = anchor_of(match.group(2))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def link_problem(cited: Cited) -> str | None:
    """Return why a relative link does not resolve, or None when it does."""
    target = cited.text
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: …
        return None
    path_text, _, anchor = target.partition("#")
    path = (cited.doc.parent / path_text).resolve() if path_text else cited.doc
    try:
        path.relative_to(ROOT)
    except ValueError:
        return "points outside the repository"
    if not path.exists():
        return f"{path.relative_to(ROOT)} does not exist"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"{path.relative_to(ROOT).as_posix()} has no heading #{anchor}"
    return None


def is_repository_path(text: str) -> bool:
    """Return whether a code span cites a path of the repository (see the module)."""
    if "/" not in text or text.startswith(("/", "./", "../")):
        return False
    if PLACEHOLDER.search(text) or text.startswith(RUNTIME_PREFIXES):
        return False
    first = text.split("/", 1)[0]
    return (ROOT / first).is_dir()


def permissions() -> set[str]:
    """Return every permission name (``app_label.codename``) the models declare."""
    names: set[str] = set()
    for model in apps.get_models():
        meta = model._meta
        codenames = [codename for codename, _ in meta.permissions]
        codenames += [
            f"{action}_{meta.model_name}" for action in meta.default_permissions
        ]
        names.update(f"{meta.app_label}.{codename}" for codename in codenames)
    return names


def is_project_name(text: str) -> bool:
    return DOTTED.fullmatch(text) is not None and text.split(".")[0] in PACKAGES


def name_problem(text: str, known_permissions: set[str]) -> str | None:
    """Return why a dotted name does not resolve, or None when it does."""
    if text in known_permissions or CHECK_ID.fullmatch(text):
        return None
    try:
        ref_resolve(text)
    except RefError as error:
        return str(error)
    return None


def test_the_docs_exist() -> None:
    assert all(doc.is_file() for doc in DOCS)
    assert (ROOT / "docs" / "architecture.md").is_file()  # pyproject.toml cites it


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = [
        f"{cited.where()}: {problem}"
        for cited in links(doc)
        if (problem := link_problem(cited)) is not None
    ]
    assert broken == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_cited_paths_exist(doc: Path) -> None:
    missing = [
        cited.where()
        for cited in code_spans(doc)
        if is_repository_path(cited.text)
        and not (ROOT / cited.text).exists()
        and not CAPITALS.search(cited.text)
    ]
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_cited_dotted_names_resolve(doc: Path) -> None:
    known = permissions()
    broken = [
        f"{cited.where()}: {problem}"
        for cited in code_spans(doc)
        if is_project_name(cited.text)
        and (problem := name_problem(cited.text, known)) is not None
    ]
    assert broken == []


def test_the_checker_tells_a_broken_citation_from_a_good_one() -> None:
    known = permissions()
    assert name_problem("library.cache.keys.cache_key", known) is None
    assert name_problem("library.issue_loan", known) is None
    assert name_problem("library.cache.keys.no_such_name", known) is not None
    assert is_repository_path("library/cache/keys.py")
    assert not is_repository_path("var/labs/<id>/")
    assert not is_repository_path("/admin/rq/")
    doc = ROOT / "docs" / "index.md"
    assert link_problem(Cited(doc, 1, "architecture.md#a-loans-path")) is None
    assert link_problem(Cited(doc, 1, "architecture.md#no-such-heading")) is not None
    assert link_problem(Cited(doc, 1, "no-such-page.md")) is not None
    assert anchor_of("The `lab` command") == "the-lab-command"
    assert anchor_of("A loan's path") == "a-loans-path"


# --- the labs' table ----------------------------------------------------------------

LAB_ROW = re.compile(r"^\| `([a-z0-9-]+)` \| ([^|]+) \| (.+) \|$")


def labs_table() -> dict[str, tuple[str, list[str]]]:
    """Return the rows of docs/labs.md's table of labs: slug to area and tables."""
    rows: dict[str, tuple[str, list[str]]] = {}
    for _, line in prose_lines(ROOT / "docs" / "labs.md"):
        match = LAB_ROW.match(line)
        if match is not None:
            tables = re.findall(r"`([a-z0-9_]+)`", match.group(3))
            rows[match.group(1)] = (match.group(2).strip(), tables)
    return rows


def test_the_labs_table_lists_every_lab_with_its_area_and_model_tables() -> None:
    rows = labs_table()
    assert list(rows) == list(LABS), "docs/labs.md lists the labs in registry order"
    for slug in LABS:
        lesson = lesson_get(slug)
        assert lesson is not None
        area, tables = rows[slug]
        assert area == lesson.area.value, slug
        assert tables == list(default_tables(slug)), slug
