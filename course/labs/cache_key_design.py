"""Lab for "Cache Key Design": what a hand-built key gets wrong, and the fix.

Model part, ported from the lesson's three experiments on its seven-book catalogue
(held in an in-memory SQLite database, so searches use SQLite's own ``LIKE``):

1. ``keys`` — keys the system's generator, ``library.cache.keys.cache_key``, gives
   for the lesson's cases: two searches a colon used to merge, one list page for two
   branches, one search with its criteria in either order and a search whose
   criteria are long enough to be summarised. Extra table ``checks``: whether the
   two orders agree and how long the summarised key is.
2. ``collision`` — lookups through one cache. Hand-glued keys (``search:`` + title
   + ``:`` + author, and a list key without the branch) hand the second query the
   first one's answer; the generated keys send both to the origin and get the right
   rows. ``source`` is where the answer came from. Extra table ``leak``: how many
   titles branch 3 was shown that are not on its shelves.
3. ``cardinality`` — ``requests`` list requests cycling over three branches and two
   pages, each carrying a unique request id, cached under three key forms: the right
   fields, one field too many (the request id) and one too few (no tenant).
   ``wrong`` counts answers that differ from what the origin would return.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import partial

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.jsnum import js_fixed_number
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


def model(params: Params, progress: Progress) -> Tables:
    requests = int_param(params, "requests")
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


# --- live part: the real Redis store and the real catalogue behind daphne ----------

LIVE_QUERY = "Book 1"
LIVE_OWNER = 2  # the branch whose answer is stored first
LIVE_OTHER = 3  # the branch that asks next
LIVE_NAIVE_LIFETIME_MS = 60_000
_BOOK_LINK = re.compile(r'<a href="/books/(\d+)/">')


@dataclass(frozen=True)
class Served:
    """What one lookup handed to a branch: book ids and titles, in page order."""

    ids: list[int]
    titles: list[str]


def _origin_page(branch: int, query: str) -> Served:
    """Return page 1 of ``branch``'s search straight from the database."""
    from library import selectors

    page = selectors.branch_books_page(branch_id=branch, query=query, page=1)
    books = list(page.object_list)
    return Served([b.pk for b in books], [b.title for b in books])


def _served_branches(served: Served) -> list[int]:
    from library.models import Book

    found = Book.objects.filter(pk__in=served.ids).values_list("branch_id", flat=True)
    return sorted(set(found))


def _tenant_row(
    case: str, key: str, asked: int, served: Served, query: str
) -> list[Cell]:
    """Return a ``live_tenants`` row: which branch's books a lookup really served."""
    branches = _served_branches(served)
    if any(branch != asked for branch in branches):
        result = "leak"
    elif served == _origin_page(asked, query):
        result = "correct"
    else:
        result = "wrong"
    shown: Cell = (
        branches[0] if len(branches) == 1 else ", ".join(map(str, branches)) or "none"
    )
    return [case, key, asked, shown, result]


def _naive_lookup(key: str, branch: int, query: str) -> tuple[str, Served]:
    """Cache-aside on the real Redis with a key the caller glued together."""
    import json

    from library.cache.metrics import cache_redis

    redis = cache_redis()
    raw = redis.get(key)
    if raw is not None:
        stored = json.loads(raw)
        return "hit", Served(stored["ids"], stored["titles"])
    served = _origin_page(branch, query)
    value = json.dumps({"ids": served.ids, "titles": served.titles})
    redis.set(key, value, px=LIVE_NAIVE_LIFETIME_MS)
    return "miss, stored", served


def _generated_key(branch: int, query: str) -> str:
    """Return the key the application's search uses for page 1 of ``branch``."""
    from library.cache import reads
    from library.cache.store import generation_get

    tenant = reads.branch_tenant(branch)
    return reads.SEARCH.key(
        tenant=tenant,
        generation=generation_get(reads.SEARCH.namespace, tenant),
        criteria={"q": query, "page": 1},
    )


def _page_served(html: str) -> Served:
    from html import unescape

    ids = [int(found) for found in _BOOK_LINK.findall(html)]
    titles = re.findall(r'<a href="/books/\d+/">([^<]*)</a>', html)
    return Served(ids, [unescape(title) for title in titles])


def live(params: Params, progress: Progress) -> Tables:
    """Ask the real store and the real pages whether one branch sees another's books.

    1. A deliberately naive cache-aside on the real Redis: the search for branch 2 is
       stored under a hand-glued key that leaves the branch out (``lab-<run>:search:``
       + the query); branch 3 then asks the same question, builds the same key, gets a
       hit and is served branch 2's books — the leak.
    2. The application's cached read (``library.cache.reads.branch_books_page``),
       whose keys come from ``library.cache.keys``: the two branches get two keys,
       each its own books.
    3. The same search over HTTP on a real daphne: each catalogue page lists the
       books of its own branch (the links on the page, checked in the database).

    The naive keys carry the run's id and are deleted at the end.
    """
    from course.labs.base import LabError
    from course.labs.http_caching import live_server
    from course.labs.live import live_step, new_run_id
    from library.cache import reads
    from library.cache.metrics import cache_redis
    from library.models import Branch

    query = LIVE_QUERY
    branches = (LIVE_OWNER, LIVE_OTHER)
    missing = [b for b in branches if not Branch.objects.filter(pk=b).exists()]
    if missing:
        raise LabError(f"live: the database has no branch {missing[0]}")
    for branch in branches:
        if not _origin_page(branch, query).ids:
            raise LabError(f"live: branch {branch} has no book matching {query!r}")
    run = new_run_id()
    naive_key = f"lab-{run}:search:{query}"
    rows: list[list[Cell]] = []
    leak: list[list[Cell]] = []
    try:
        live_step(progress, 0.05, "hand-glued key on the real Redis")
        for branch in branches:
            source, served = _naive_lookup(naive_key, branch, query)
            case = f"branch {branch}, key without the branch ({source})"
            rows.append(_tenant_row(case, naive_key, branch, served, query))
            if branch == LIVE_OTHER:
                own = set(_origin_page(branch, query).ids)
                foreign = [
                    title
                    for book_id, title in zip(served.ids, served.titles, strict=True)
                    if book_id not in own
                ]
                leak.append([len(served.ids), len(foreign), ", ".join(foreign)])
    finally:
        cache_redis().delete(naive_key)

    live_step(progress, 0.2, "generated keys: the application's cached search")
    for branch in branches:
        found = reads.branch_books_page(branch_id=branch, query=query, page=1)
        if found is None:
            raise LabError(f"live: branch {branch} vanished during the run")
        books = list(found[1].object_list)
        served = Served([b.pk for b in books], [b.title for b in books])
        key = _generated_key(branch, query)
        rows.append(
            _tenant_row(f"branch {branch}, generated key", key, branch, served, query)
        )

    with live_server(progress) as client:
        for index, branch in enumerate(branches):
            path = f"/branches/{branch}/books/"
            live_step(progress, 0.6 + 0.15 * index, f"GET {path}?q={query}")
            response = client.get(path, params={"q": query})
            if response.status_code != 200:
                raise LabError(f"live: GET {path} answered {response.status_code}")
            served = _page_served(response.text)
            key = _generated_key(branch, query)
            case = f"GET {path}?q={query} (real daphne)"
            rows.append(_tenant_row(case, key, branch, served, query))
    return {
        "live_tenants": table(
            ["case", "key", "branch_asked", "branch_served", "result"], rows
        ),
        "live_leak": table(["served", "foreign", "foreign_titles"], leak),
    }


LAB = Lab(
    slug="cache-key-design",
    title="Cache Key Design",
    params=(
        Param(
            "requests",
            "int",
            400,
            "list requests in the cardinality stream",
            minimum=0,
            maximum=100_000,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="cardinality",
            label="key_form",
            values=("hits", "wrong"),
            title="Hits and wrong answers per key form",
        ),
        Chart(
            table="cardinality",
            label="key_form",
            values=("ratio_pct",),
            title="Hit ratio per key form",
            unit="%",
        ),
    ),
)
