"""The model part of the cache-key-design lab: the generated keys, the collisions of
glued keys and the cardinality of the key forms, on an in-memory catalogue.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import partial

from course.labs.cache_key_design.params import CacheKeyDesignParams
from course.labs.harness.base import Cell, Progress, Tables, table
from course.labs.harness.jsnum import js_fixed_number
from library.cache.keys import CriterionValue, cache_key

# (book id, branch, year, title, author) — the lesson's catalogue; book 7's title
# holds the colon that makes the glued search keys collide.
CATALOGUE = (
    (1, 1, 1995, "Blindness", "José Saramago"),
    (2, 1, 1972, "The Disconnected", "Oğuz Atay"),
    (3, 2, 1975, "The Book of Sand", "Jorge Luis Borges"),
    (4, 2, 1932, "Yaban", "Yakup Kadri"),
    (5, 3, 1983, "Silent House", "Orhan Pamuk"),
    (6, 3, 1973, "Motherland Hotel", "Yusuf At\u0131lgan"),  # dotless i, as in Turkish
    (7, 1, 2010, "Sand: Borges Selection", "Anthology"),
)
PAGE_SIZE = 2
NAMESPACE = "library"
DEMO_GENERATION = 4  # the generation the lesson's key examples are printed with
BRANCHES = 3
PAGES = 2


class Catalogue:
    """The origin: the seven books in SQLite, with two read-only queries."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        db.execute(
            "CREATE TABLE book (book_id INTEGER PRIMARY KEY, branch_id INTEGER,"
            " publication_year INTEGER, title TEXT NOT NULL, author TEXT NOT NULL)"
        )
        db.executemany("INSERT INTO book VALUES (?, ?, ?, ?, ?)", CATALOGUE)
        self.queries = 0

    def search(self, title: str, author: str) -> list[str]:
        """Return titles containing both fragments (SQLite LIKE: ASCII case-blind)."""
        self.queries += 1
        found = self._db.execute(
            "SELECT title FROM book WHERE title LIKE :title AND author LIKE :author"
            " ORDER BY book_id",
            {"title": f"%{title}%", "author": f"%{author}%"},
        )
        return [row[0] for row in found]

    def branch_page(self, branch: int, page: int) -> list[str]:
        """Return one page of a branch's titles in book order."""
        self.queries += 1
        found = self._db.execute(
            "SELECT title FROM book WHERE branch_id = :branch ORDER BY book_id"
            " LIMIT :size OFFSET :skip",
            {"branch": branch, "size": PAGE_SIZE, "skip": (page - 1) * PAGE_SIZE},
        )
        return [row[0] for row in found]


@contextmanager
def open_catalogue() -> Iterator[Catalogue]:
    with closing(sqlite3.connect(":memory:")) as db:
        yield Catalogue(db)


def demo_key(
    operation: str, tenant: str, criteria: dict[str, CriterionValue] | None = None
) -> str:
    return cache_key(
        namespace=NAMESPACE,
        operation=operation,
        tenant=tenant,
        generation=DEMO_GENERATION,
        criteria=criteria,
    )


# Eight criteria whose escaped text runs past the 48-character limit. Listed in an
# order of their own: the generator sorts them anyway.
LONG_SEARCH: dict[str, CriterionValue] = {
    "page": 3,
    "yearTo": 1980,
    "yearFrom": 1970,
    "sort": "title",
    "status": "on_shelf",
    "lang": "tr",
    "author": "Oğuz Atay",
    "title": "The Disconnected",
}


def key_rows() -> tuple[list[list[Cell]], list[list[Cell]]]:
    """Return the ``keys`` rows and the ``checks`` rows."""
    author_first = demo_key(
        "search", "branch-1", {"author": "Atay", "title": "The Disconnected"}
    )
    title_first = demo_key(
        "search", "branch-1", {"title": "The Disconnected", "author": "Atay"}
    )
    summarised = demo_key("search", "branch-1", LONG_SEARCH)
    keys: list[list[Cell]] = [
        [
            "search: title Sand, author Borges",
            demo_key("search", "branch-2", {"title": "Sand", "author": "Borges"}),
        ],
        [
            "search: colon inside the title, author left empty",
            demo_key("search", "branch-2", {"title": "Sand: Borges", "author": ""}),
        ],
        ["list, page 1 of branch 2", demo_key("list", "branch-2", {"page": 1})],
        ["list, page 1 of branch 3", demo_key("list", "branch-3", {"page": 1})],
        ["search, author named before title", author_first],
        ["search, title named before author", title_first],
        ["search with eight criteria (digest)", summarised],
    ]
    checks: list[list[Cell]] = [
        ["both orders give one key", "yes" if author_first == title_first else "no"],
        ["length of the summarised key", len(summarised)],
    ]
    return keys, checks


@dataclass(frozen=True)
class Lookup:
    key: str
    source: str  # "cache" or "origin"
    result: list[str]


class Box:
    """A cache with no eviction and no lifetime: only the key decides a hit."""

    def __init__(self) -> None:
        self._entries: dict[str, list[str]] = {}

    def fetch(self, key: str, produce: Callable[[], list[str]]) -> Lookup:
        if key in self._entries:
            return Lookup(key, "cache", self._entries[key])
        value = produce()
        self._entries[key] = value
        return Lookup(key, "origin", value)


def glued_search_key(title: str, author: str) -> str:
    """Return the hand-built search key the lesson warns about.

    Empty values are skipped and spaces squeezed out, the way a tidy hand-written key
    often is, and the rest is joined with ":" — which a title may also contain.
    """
    given = [value.replace(" ", "") for value in (title, author) if value]
    return ":".join(["search", *given])


GLUED_LIST_KEY = "list:page:1"  # the page number only: no branch in the key


def collision_rows(
    catalogue: Catalogue,
) -> tuple[list[list[Cell]], list[list[Cell]]]:
    """Return the ``collision`` rows and the ``leak`` row."""
    box = Box()
    rows: list[list[Cell]] = []

    def record(case: str, found: Lookup) -> Lookup:
        rows.append([case, found.key, found.source, ", ".join(found.result)])
        return found

    searches = (("A", "Sand", "Borges"), ("B", "Sand: Borges", ""))
    for name, title, author in searches:
        record(
            f"{name} (title={title!r}, author={author!r}), hand-glued key",
            box.fetch(
                glued_search_key(title, author),
                partial(catalogue.search, title, author),
            ),
        )
    for name, title, author in searches:
        record(
            f"{name}, generated key",
            box.fetch(
                demo_key("search", "branch-2", {"title": title, "author": author}),
                partial(catalogue.search, title, author),
            ),
        )
    shown_to_3: list[str] = []
    for branch in (2, 3):
        found = record(
            f"branch {branch}, page 1, key without the branch",
            box.fetch(GLUED_LIST_KEY, partial(catalogue.branch_page, branch, 1)),
        )
        shown_to_3 = found.result
    for branch in (2, 3):
        record(
            f"branch {branch}, page 1, generated key",
            box.fetch(
                demo_key("list", f"branch-{branch}", {"page": 1}),
                partial(catalogue.branch_page, branch, 1),
            ),
        )
    own = set(catalogue.branch_page(3, 1))
    foreign = [title for title in shown_to_3 if title not in own]
    leak: list[list[Cell]] = [[len(shown_to_3), len(foreign), ", ".join(foreign)]]
    return rows, leak


# The three key forms of the cardinality experiment, in the course's row order. Each
# takes (branch, page, request id); only the fields it passes can tell requests apart.
def _right_fields(branch: int, page: int, request_id: str) -> str:
    return _list_key(f"branch-{branch}", {"page": page})


def _extra_field(branch: int, page: int, request_id: str) -> str:
    return _list_key(f"branch-{branch}", {"page": page, "request": request_id})


def _missing_field(branch: int, page: int, request_id: str) -> str:
    return _list_key("shared", {"page": page})


def _list_key(tenant: str, criteria: dict[str, CriterionValue]) -> str:
    return cache_key(
        namespace=NAMESPACE, operation="list", tenant=tenant, criteria=criteria
    )


KEY_FORMS: tuple[tuple[str, Callable[[int, int, str], str]], ...] = (
    ("correct (tenant + criteria)", _right_fields),
    ("extra field (request id)", _extra_field),
    ("missing field (no tenant)", _missing_field),
)


def cardinality_rows(
    catalogue: Catalogue, requests: int, progress: Progress
) -> list[list[Cell]]:
    """Return one ``cardinality`` row per key form."""
    stream = [(i % BRANCHES + 1, i % PAGES + 1, f"r-{i}") for i in range(requests)]
    # What each (branch, page) really shows: the yardstick for ``wrong``. Looked up
    # once per pair and kept out of the origin count, like the course's check.
    truth = {
        (branch, page): ", ".join(catalogue.branch_page(branch, page))
        for branch in range(1, BRANCHES + 1)
        for page in range(1, PAGES + 1)
    }
    rows: list[list[Cell]] = []
    for i, (label, make_key) in enumerate(KEY_FORMS):
        progress(0.4 + 0.18 * i, f"cardinality: {label}")
        box: dict[str, str] = {}
        hits = misses = wrong = 0
        for branch, page, request_id in stream:
            key = make_key(branch, page, request_id)
            if key in box:
                hits += 1
                answer = box[key]
            else:
                misses += 1
                answer = ", ".join(catalogue.branch_page(branch, page))
                box[key] = answer
            if answer != truth[(branch, page)]:
                wrong += 1
        ratio = hits / requests * 100 if requests else math.nan
        rows.append([label, hits, misses, js_fixed_number(ratio), wrong, len(box)])
    return rows


def model(params: CacheKeyDesignParams, progress: Progress) -> Tables:
    requests = params.requests
    progress(0.05, "keys: the generator on the lesson's cases")
    keys, checks = key_rows()
    with open_catalogue() as catalogue:
        progress(0.2, "collision: glued keys against generated keys")
        collisions, leak = collision_rows(catalogue)
        cardinality = cardinality_rows(catalogue, requests, progress)
    return {
        "keys": table(["case", "key"], keys),
        "checks": table(["check", "value"], checks),
        "collision": table(["case", "key", "source", "result"], collisions),
        "leak": table(["served", "foreign", "foreign_titles"], leak),
        "cardinality": table(
            ["key_form", "hits", "misses", "ratio_pct", "wrong", "entries"],
            cardinality,
        ),
    }
