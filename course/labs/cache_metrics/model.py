"""The model part of the cache-metrics lab: the measurement database, a metered LRU
and the two workloads, computed in-process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache

from course.labs.cache_metrics.params import CacheMetricsParams
from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.dataset_shape import (
    AUTHOR_COUNT,
    BOOK_COUNT,
    BRANCH_COUNT,
    FIRST_YEAR,
    LOAN_COUNT,
    MEMBER_COUNT,
    YEAR_SPAN,
)
from course.labs.harness.jsnum import JsLcg, js_fixed_number
from library.cache.keys import cache_key

# --- the measurement database (its shape: course.labs.harness.dataset_shape) -----

HOT_TITLES = 60  # book reads concentrate on the first 60 titles

Row = dict[str, object]
Value = Row | list[Row]


def _book_branch(book: int) -> int:
    return book % BRANCH_COUNT + 1


@dataclass(frozen=True)
class _Loan:
    loan_id: int
    book_id: int
    member_id: int
    open: bool  # no return date yet: the copy is out


def _loans() -> list[_Loan]:
    # Every fifth loan is still out; ids cycle books and members in order.
    return [
        _Loan(n, n % BOOK_COUNT + 1, n % MEMBER_COUNT + 1, n % 5 == 0)
        for n in range(1, LOAN_COUNT + 1)
    ]


class LibraryData:
    """Answers for the lesson's origin queries, derived once from the setup rules."""

    def __init__(self) -> None:
        loans = _loans()
        out = {loan.book_id for loan in loans if loan.open}
        self._on_shelf = {
            branch: sum(
                1
                for book in range(1, BOOK_COUNT + 1)
                if _book_branch(book) == branch and book not in out
            )
            for branch in range(1, BRANCH_COUNT + 1)
        }
        self._histories: dict[int, list[Row]] = {}
        for loan in loans:  # already in loan-id order
            self._histories.setdefault(loan.member_id, []).append(
                {"loan_id": loan.loan_id, "book_id": loan.book_id}
            )

    def book(self, book_id: int, *, with_year: bool) -> Row:
        row: Row = {
            "book_id": book_id,
            "title": f"Book {book_id}",
            "author": f"Author {book_id % AUTHOR_COUNT + 1}",
        }
        if with_year:
            row["publication_year"] = FIRST_YEAR + book_id % YEAR_SPAN
        return row

    def stock(self, branch: int) -> Row:
        return {"branch_id": branch, "on_shelf": self._on_shelf.get(branch, 0)}

    def shelf_list(self, branch: int) -> list[Row]:
        return [
            {"book_id": book, "title": f"Book {book}"}
            for book in range(1, BOOK_COUNT + 1)
            if _book_branch(book) == branch
        ]

    def history(self, member: int) -> list[Row]:
        return list(self._histories.get(member, []))


@cache
def library_data() -> LibraryData:
    return LibraryData()


def json_size(value: object) -> int:
    """Return the UTF-8 length of ``JSON.stringify(value)`` (no spaces)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8"))


@dataclass(frozen=True)
class Answer:
    """What the origin returns for one query, with the bytes it weighs."""

    value: Value
    size: int  # json_size(value)


class CountingOrigin:
    """The origin: every call is one query."""

    def __init__(self, data: LibraryData, *, with_year: bool) -> None:
        self.queries = 0
        self._data = data
        self._with_year = with_year

    def read(self, kind: str, ident: int) -> Answer:
        self.queries += 1
        return _answer(self._data, kind, ident, with_year=self._with_year)


@lru_cache(maxsize=4096)
def _answer(data: LibraryData, kind: str, ident: int, *, with_year: bool) -> Answer:
    """The origin's answer to one question, built and weighed once per process.

    The same question always has the same answer here (the data never changes), and
    weighing it (its JSON text) was most of a run's time: a workload asks a few
    hundred questions thousands of times. The cache keeps the answer it is given and
    never changes it, so one answer object may sit in several entries.
    """
    readers: dict[str, Callable[[int], Value]] = {
        "book": lambda book: data.book(book, with_year=with_year),
        "stock": data.stock,
        "list": data.shelf_list,
        "history": data.history,
    }
    value = readers[kind](ident)
    return Answer(value, json_size(value))


# --- the metered cache ------------------------------------------------------------


@dataclass
class Counters:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    hit_bytes: int = 0
    miss_bytes: int = 0


@dataclass
class _Entry:
    value: Value
    size: int


@dataclass
class MeteredLru:
    """Least-recently-used cache that counts hits, misses, evictions and bytes.

    Entries never expire here: the lesson's measurements use an unlimited lifetime.
    A dict keeps insertion order, so popping and re-inserting on a hit moves the key
    to the young end and the oldest key is always first.
    """

    capacity: int
    counters: Counters = field(default_factory=Counters)
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def get(self, key: str) -> Value | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            self.counters.misses += 1
            return None
        self._entries[key] = entry
        self.counters.hits += 1
        self.counters.hit_bytes += entry.size
        return entry.value

    def set(self, key: str, answer: Answer) -> None:
        # Bytes fetched from the origin are counted when they are stored.
        self.counters.miss_bytes += answer.size
        self._entries.pop(key, None)
        self._entries[key] = _Entry(answer.value, answer.size)
        while len(self._entries) > self.capacity:
            del self._entries[next(iter(self._entries))]
            self.counters.evictions += 1


def ratio_pct(part: int, whole: int) -> float:
    """Return ``Number((part / whole * 100).toFixed(1))``; NaN when whole is 0."""
    return js_fixed_number(part / whole * 100) if whole else float("nan")


# --- 1. capacity -------------------------------------------------------------------

Request = tuple[str, int]


def _draw(rng: JsLcg, shares: tuple[tuple[float, str, int], ...]) -> Request:
    """Draw one request: the first kind whose cumulative share exceeds the roll."""
    roll = rng.random()
    for bound, kind, ids in shares[:-1]:
        if roll < bound:
            return kind, rng.below(ids) + 1
    _, kind, ids = shares[-1]
    return kind, rng.below(ids) + 1


CAPACITY_MIX = (
    (0.75, "book", HOT_TITLES),
    (0.9, "stock", BRANCH_COUNT),
    (1.0, "list", BRANCH_COUNT),
)
BREAKDOWN_MIX = (
    (0.7, "book", HOT_TITLES),
    (0.8, "stock", BRANCH_COUNT),
    (0.85, "list", BRANCH_COUNT),
    (1.0, "history", MEMBER_COUNT),
)
NAMESPACES = ("book", "stock", "list", "history")


def workload(
    count: int, seed: int, mix: tuple[tuple[float, str, int], ...]
) -> list[Request]:
    rng = JsLcg(seed)
    return [_draw(rng, mix) for _ in range(count)]


def _tenant(kind: str, branch: int) -> str:
    return "shared" if kind == "book" else f"branch-{branch}"


@lru_cache(maxsize=4096)
def entry_key(kind: str, ident: int, branch: int) -> str:
    """The cache key of one read, built as the library builds its keys.

    Only a key's identity matters to the counters (one entry per kind and id), so the
    library's own ``cache_key`` spells it: namespace, schema, generation, tenant and
    the kind as the operation, the id as its one criterion. A workload asks for a
    few hundred distinct keys thousands of times, and ``cache_key`` is a pure
    function that escapes every part: each key is built once per process.
    """
    return cache_key(
        namespace="library",
        operation=kind,
        tenant=_tenant(kind, branch),
        criteria={"id": ident},
    )


def capacity_row(requests: list[Request], capacity: int) -> list[Cell]:
    cache_ = MeteredLru(capacity)
    origin = CountingOrigin(library_data(), with_year=True)
    for kind, ident in requests:
        # In this workload the stock and list ids are branch ids.
        key = entry_key(kind, ident, branch=ident)
        if cache_.get(key) is None:
            cache_.set(key, origin.read(kind, ident))
    c = cache_.counters
    return [
        capacity,
        c.hits,
        c.misses,
        ratio_pct(c.hits, c.hits + c.misses),
        c.evictions,
        origin.queries,
    ]


# --- 2. the breakdown ----------------------------------------------------------------


@dataclass
class Breakdown:
    counters: Counters
    per_namespace: dict[str, list[int]]  # namespace -> [hits, misses]
    origin_queries: int


def breakdown(
    requests: list[Request], capacity: int, cached: frozenset[str]
) -> Breakdown:
    cache_ = MeteredLru(capacity)
    origin = CountingOrigin(library_data(), with_year=False)
    per_namespace = {name: [0, 0] for name in NAMESPACES}
    for kind, ident in requests:
        if kind not in cached:
            origin.read(kind, ident)
            per_namespace[kind][1] += 1
            continue
        # Here every non-book id is folded onto a branch for the tenant segment.
        key = entry_key(kind, ident, branch=ident % BRANCH_COUNT + 1)
        hit = cache_.get(key) is not None
        if not hit:
            cache_.set(key, origin.read(kind, ident))
        per_namespace[kind][0 if hit else 1] += 1
    return Breakdown(cache_.counters, per_namespace, origin.queries)


# --- the lab -------------------------------------------------------------------------


def model(params: CacheMetricsParams, progress: Progress) -> Tables:
    count, seed = params.requests, params.seed
    capacities = params.capacities
    capacity_requests = workload(count, seed, CAPACITY_MIX)
    capacity_rows: list[list[Cell]] = []
    for i, capacity in enumerate(capacities):
        progress(0.05 + 0.5 * i / len(capacities), f"capacity {capacity}")
        capacity_rows.append(capacity_row(capacity_requests, capacity))

    progress(0.6, "breakdown: every namespace cached")
    mixed = workload(count, seed, BREAKDOWN_MIX)
    size = params.breakdown_capacity
    full = breakdown(mixed, size, frozenset(NAMESPACES))
    progress(0.8, "breakdown: loan histories not cached")
    lean = breakdown(mixed, size, frozenset(NAMESPACES) - {"history"})

    namespace_rows: list[list[Cell]] = [
        [name, hits + misses, hits, misses, ratio_pct(hits, hits + misses)]
        for name, (hits, misses) in full.per_namespace.items()
    ]
    c = full.counters
    totals: list[Cell] = [
        ratio_pct(c.hits, c.hits + c.misses),
        ratio_pct(c.hit_bytes, c.hit_bytes + c.miss_bytes),
        c.hit_bytes,
        c.miss_bytes,
        full.origin_queries,
    ]
    book_hits, book_misses = lean.per_namespace["book"]
    without: list[Cell] = [
        ratio_pct(book_hits, book_hits + book_misses),
        lean.counters.evictions,
        lean.origin_queries,
    ]
    return {
        "capacity": table(
            [
                "capacity",
                "hits",
                "misses",
                "hit_ratio_pct",
                "evictions",
                "origin_queries",
            ],
            capacity_rows,
        ),
        "namespaces": table(
            ["namespace", "requests", "hits", "misses", "hit_ratio_pct"],
            namespace_rows,
        ),
        "totals": table(
            [
                "request_hit_ratio_pct",
                "byte_hit_ratio_pct",
                "hit_bytes",
                "miss_bytes",
                "origin_queries",
            ],
            [totals],
        ),
        "without_history": table(
            ["book_hit_ratio_pct", "evictions", "origin_queries"], [without]
        ),
        # The lesson prints the full run's eviction count next to the lean run's.
        "evictions": table(
            ["history_cached", "evictions"],
            [["yes", c.evictions], ["no", lean.counters.evictions]],
        ),
    }
