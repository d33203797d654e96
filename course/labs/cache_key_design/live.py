"""The live part of the cache-key-design lab: the real Redis store and the real
catalogue behind daphne.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html import unescape

from course.labs.cache_key_design.params import CacheKeyDesignParams
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step, new_run_id
from course.labs.harness.live_http import daphne_client
from library import selectors
from library.cache import reads
from library.cache.metrics import cache_redis
from library.cache.store import generation_get
from library.models import Book, Branch

# --- live part: the real Redis store and the real catalogue behind daphne ----------

# A word both the course's titles ("Book n") and the demo catalogue's ("The Jungle
# Book", "The Book of Tea", …) contain, held by both branches below in either.
LIVE_QUERY = "Book"
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

    page = selectors.branch_books_page(branch_id=branch, query=query, page=1)
    books = list(page.object_list)
    return Served([b.pk for b in books], [b.title for b in books])


def _served_branches(served: Served) -> list[int]:

    found = Book.objects.filter(pk__in=served.ids).values_list("branch_id", flat=True)
    return sorted(set(found))


@dataclass(frozen=True)
class Lookup:
    """Which branch's books one lookup really served, checked in the database."""

    case: str
    key: str
    asked: int
    served_branches: list[int]
    result: str  # leak, correct (the origin's own page) or wrong


@dataclass(frozen=True)
class Leak:
    served: int
    foreign_titles: list[str]  # served to the other branch, not its own


@dataclass(frozen=True)
class Measurement:
    lookups: list[Lookup]
    leaks: list[Leak]


def _lookup(case: str, key: str, asked: int, served: Served, query: str) -> Lookup:
    """Check what a lookup served against the database's own page for ``asked``."""
    branches = _served_branches(served)
    if any(branch != asked for branch in branches):
        result = "leak"
    elif served == _origin_page(asked, query):
        result = "correct"
    else:
        result = "wrong"
    return Lookup(case, key, asked, branches, result)


def _naive_lookup(key: str, branch: int, query: str) -> tuple[str, Served]:
    """Cache-aside on the real Redis with a key the caller glued together."""

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

    tenant = reads.branch_tenant(branch)
    return reads.SEARCH.key(
        tenant=tenant,
        generation=generation_get(reads.SEARCH.namespace, tenant),
        criteria={"q": reads.search_canonical(query), "page": 1},
    )


def _page_served(html: str) -> Served:

    ids = [int(found) for found in _BOOK_LINK.findall(html)]
    titles = re.findall(r'<a href="/books/\d+/">([^<]*)</a>', html)
    return Served(ids, [unescape(title) for title in titles])


def measure(params: CacheKeyDesignParams, progress: Progress) -> Measurement:
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
    lookups: list[Lookup] = []
    leaks: list[Leak] = []
    try:
        live_step(progress, 0.05, "hand-glued key on the real Redis")
        for branch in branches:
            source, served = _naive_lookup(naive_key, branch, query)
            case = f"branch {branch}, key without the branch ({source})"
            lookups.append(_lookup(case, naive_key, branch, served, query))
            if branch == LIVE_OTHER:
                own = set(_origin_page(branch, query).ids)
                foreign = [
                    title
                    for book_id, title in zip(served.ids, served.titles, strict=True)
                    if book_id not in own
                ]
                leaks.append(Leak(len(served.ids), foreign))
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
        case = f"branch {branch}, generated key"
        lookups.append(_lookup(case, key, branch, served, query))

    with daphne_client(progress) as client:
        for index, branch in enumerate(branches):
            path = f"/branches/{branch}/books/"
            live_step(progress, 0.6 + 0.15 * index, f"GET {path}?q={query}")
            response = client.get(path, params={"q": query})
            if response.status_code != 200:
                raise LabError(f"live: GET {path} answered {response.status_code}")
            served = _page_served(response.text)
            key = _generated_key(branch, query)
            case = f"GET {path}?q={query} (real daphne)"
            lookups.append(_lookup(case, key, branch, served, query))
    return Measurement(lookups, leaks)


def tables(params: CacheKeyDesignParams, measured: Measurement) -> Tables:
    """Each lookup with the branch it served; the leak's foreign books."""
    rows: list[list[Cell]] = []
    for found in measured.lookups:
        branches = found.served_branches
        shown: Cell = (
            branches[0]
            if len(branches) == 1
            else ", ".join(map(str, branches)) or "none"
        )
        rows.append([found.case, found.key, found.asked, shown, found.result])
    return {
        "live_tenants": table(
            ["case", "key", "branch_asked", "branch_served", "result"], rows
        ),
        "live_leak": table(
            ["served", "foreign", "foreign_titles"],
            [
                [leak.served, len(leak.foreign_titles), ", ".join(leak.foreign_titles)]
                for leak in measured.leaks
            ],
        ),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
