"""Lab for "Cache Metrics": hit ratio against capacity, per namespace and per byte.

Model part, two workloads from the course's generator (``requests`` and ``seed`` drive
both):

1. ``capacity`` — book / stock / list reads (75 / 15 / 10 %) through a least-recently-
   used cache of each size in ``capacities``: hits, misses, evictions, origin queries.
2. the breakdown — book / stock / list / loan-history reads (70 / 10 / 5 / 15 %) through
   one cache of ``breakdown_capacity`` entries, counted per namespace and per byte
   (``namespaces``, ``totals``), then again with loan histories kept out of the cache
   (``without_history``).

The origin is the lesson's measurement database: 300 books and 4000 loans generated
from fixed rules. Its rows are derived here from the same rules instead of being
queried from SQLite. The values matter only through their JSON size, and a derived
row serialises to the same text as the row the lesson's query returns, in the same
column order.

The live part (``live``) runs both workloads through the application's bounded
in-process tier and reads the counts back from its metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, cast

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    LabError,
    Param,
    Params,
    Progress,
    Tables,
    int_list_param,
    int_param,
    table,
)
from course.labs.jsnum import SEED_MAX, JsLcg, js_fixed_number

if TYPE_CHECKING:
    from library.cache.metrics import NamespaceMetrics

# --- the measurement database ---------------------------------------------------

BOOK_COUNT = 300
LOAN_COUNT = 4000
MEMBER_COUNT = 200
BRANCH_COUNT = 4
AUTHOR_COUNT = 40
FIRST_YEAR, YEAR_SPAN = 1950, 70
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


class CountingOrigin:
    """The origin: every call is one query."""

    def __init__(self, data: LibraryData, *, with_year: bool) -> None:
        self.queries = 0
        self._data = data
        self._readers: dict[str, Callable[[int], Value]] = {
            "book": lambda book: data.book(book, with_year=with_year),
            "stock": data.stock,
            "list": data.shelf_list,
            "history": data.history,
        }

    def read(self, kind: str, ident: int) -> Value:
        self.queries += 1
        return self._readers[kind](ident)


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

    def set(self, key: str, value: Value) -> None:
        # Bytes fetched from the origin are counted when they are stored.
        size = json_size(value)
        self.counters.miss_bytes += size
        self._entries.pop(key, None)
        self._entries[key] = _Entry(value, size)
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


def capacity_row(requests: list[Request], capacity: int) -> list[Cell]:
    cache_ = MeteredLru(capacity)
    origin = CountingOrigin(library_data(), with_year=True)
    for kind, ident in requests:
        # In this workload the stock and list ids are branch ids.
        key = f"library:s1:g1:t{_tenant(kind, ident)}:{kind}:{ident}"
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
        key = f"library:s1:g1:t{_tenant(kind, ident % BRANCH_COUNT + 1)}:{kind}:{ident}"
        hit = cache_.get(key) is not None
        if not hit:
            cache_.set(key, origin.read(kind, ident))
        per_namespace[kind][0 if hit else 1] += 1
    return Breakdown(cache_.counters, per_namespace, origin.queries)


# --- the lab -------------------------------------------------------------------------


def model(params: Params, progress: Progress) -> Tables:
    count, seed = int_param(params, "requests"), int_param(params, "seed")
    capacities = int_list_param(params, "capacities")
    capacity_requests = workload(count, seed, CAPACITY_MIX)
    capacity_rows: list[list[Cell]] = []
    for i, capacity in enumerate(capacities):
        progress(0.05 + 0.5 * i / len(capacities), f"capacity {capacity}")
        capacity_rows.append(capacity_row(capacity_requests, capacity))

    progress(0.6, "breakdown: every namespace cached")
    mixed = workload(count, seed, BREAKDOWN_MIX)
    size = int_param(params, "breakdown_capacity")
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


# --- live part ----------------------------------------------------------------------

LIVE_LIFETIME_S = 3600  # the lesson's entries never expire; an hour outlives a run


@dataclass(frozen=True)
class LiveCatalogue:
    """Which real rows the workload's ids stand for: the n-th book, branch, member."""

    books: list[int]
    branches: list[int]
    members: list[int]

    @classmethod
    def load(cls) -> LiveCatalogue:
        from course.labs.base import LabError
        from library.models import Book, Branch, Member

        found = cls(
            books=list(
                Book.objects.order_by("pk").values_list("pk", flat=True)[:HOT_TITLES]
            ),
            branches=list(
                Branch.objects.order_by("pk").values_list("pk", flat=True)[
                    :BRANCH_COUNT
                ]
            ),
            members=list(
                Member.objects.order_by("pk").values_list("pk", flat=True)[
                    :MEMBER_COUNT
                ]
            ),
        )
        wanted = (
            ("books", found.books, HOT_TITLES),
            ("branches", found.branches, BRANCH_COUNT),
            ("members", found.members, MEMBER_COUNT),
        )
        for what, rows, count in wanted:
            if len(rows) < count:
                raise LabError(
                    f"live: the workload needs {count} {what}, the database has "
                    f"{len(rows)} (manage.py seed_library creates them)"
                )
        return found


class LiveOrigin:
    """The application's selectors on the real database: one call per origin query."""

    def __init__(self, catalogue: LiveCatalogue, *, with_year: bool) -> None:
        self.catalogue = catalogue
        self.with_year = with_year

    def read(self, kind: str, ident: int) -> Value:
        from library import selectors

        c = self.catalogue
        if kind == "book":
            detail = selectors.book_detail(book_id=c.books[ident - 1])
            if detail is None:
                raise LabError(f"live: book #{c.books[ident - 1]} vanished")
            book = detail.book
            row: Row = {"book_id": book.pk, "title": book.title, "author": book.author}
            if self.with_year:
                row["publication_year"] = book.publication_year
            return row
        if kind == "stock":
            branch = c.branches[ident - 1]
            return {
                "branch_id": branch,
                "on_shelf": selectors.branch_shelf_count(branch_id=branch),
            }
        if kind == "list":
            page = selectors.branch_books_page(branch_id=c.branches[ident - 1], page=1)
            return [{"book_id": b.pk, "title": b.title} for b in page.object_list]
        history = selectors.member_history_page(member_id=c.members[ident - 1])
        if history is None:
            raise LabError(f"live: member #{c.members[ident - 1]} vanished")
        return [
            {"loan_id": loan.pk, "book_id": loan.book_id}
            for loan in history.loans.object_list
        ]


def _live_key(kind: str, ident: int) -> str:
    from library.cache.keys import cache_key

    tenant = {"book": "shared", "history": f"member-{ident}"}.get(
        kind, f"branch-{ident}"
    )
    return cache_key(
        namespace=kind, operation="lab", tenant=tenant, criteria={"id": ident}
    )


class LiveCache:
    """A bounded ``LocalTier`` whose traffic is recorded in the application's metrics.

    Each lookup records what ``library.cache.store.cache_aside`` records (hits and
    hit bytes, or misses, miss bytes and the timed origin call); the tier records
    its own evictions. The counters go to Redis under ``<prefix><kind>``
    namespaces, one set per run and cache, read back with ``metrics_read``.
    """

    def __init__(self, capacity: int, prefix: str, origin: LiveOrigin) -> None:
        from library.cache.store import LocalTier

        self.tier = LocalTier(max_entries=capacity)
        self.prefix = prefix
        self.origin = origin

    def namespace(self, kind: str) -> str:
        return f"{self.prefix}{kind}"

    def _produce(self, kind: str, ident: int) -> bytes:
        from library.cache.metrics import metrics_record
        from library.cache.store import encode

        start = time.perf_counter()
        data = encode(self.origin.read(kind, ident))
        elapsed_ms = round((time.perf_counter() - start) * 1000)
        metrics_record(
            self.namespace(kind),
            misses=1,
            miss_bytes=len(data),
            origin_calls=1,
            origin_ms_total=elapsed_ms,
        )
        return data

    def get(self, kind: str, ident: int) -> None:
        from library.cache.metrics import metrics_record

        key, namespace = _live_key(kind, ident), self.namespace(kind)
        data = self.tier.get(key, namespace=namespace)
        if data is not None:
            metrics_record(namespace, hits=1, hit_bytes=len(data))
            return
        data = self._produce(kind, ident)
        self.tier.put(key, data, lifetime_s=LIVE_LIFETIME_S, namespace=namespace)

    def bypass(self, kind: str, ident: int) -> None:
        """Answer from the origin without the cache (a namespace taken out of it)."""
        self._produce(kind, ident)


def _counts(prefix: str, since: float) -> dict[str, NamespaceMetrics]:
    """Return the run's counters per kind, read from the application's metrics."""
    from library.cache.metrics import metrics_read

    window = int(time.time() // 60 - since // 60) + 1
    return {
        name.removeprefix(prefix): metrics
        for name, metrics in metrics_read(window).items()
        if name.startswith(prefix)
    }


def _total(counts: dict[str, NamespaceMetrics], field_name: str) -> int:
    """Return one counter summed over the kinds (TypedDicts are read by name here)."""
    return sum(int(cast("dict[str, int]", m)[field_name]) for m in counts.values())


def live(params: Params, progress: Progress) -> Tables:
    """Ask the application's bounded cache and its metrics the lesson's questions.

    The cache is ``library.cache.store.LocalTier``, the application's in-process
    tier: bounded by a number of entries and least-recently-used first, which is
    the lesson's capacity. (A private Redis with ``maxmemory`` bounds bytes, and
    evicts by sampling, so a capacity of 64 entries would have no exact setting.)
    The origin is the application's selectors on the real database (the n-th book,
    branch and member stand for the workload's id n); the values stored are their
    JSON, so the byte counts are the real ones. Every hit, miss, eviction and origin
    call is recorded with ``metrics_record`` under namespaces private to the run and
    read back with ``metrics_read``, as the admin's cache page reads the site's.

    1. ``live_capacity``: the capacity workload through a tier of each capacity
       (``origin_ms``: time spent in the origin, machine-dependent);
    2. ``live_namespaces`` and ``live_totals``: the breakdown workload through one
       tier of ``breakdown_capacity`` entries;
    3. ``live_without_history``: the same with member histories answered by the
       origin directly, never stored.

    The counts depend only on the workload and the capacity, so they equal the
    model's; the bytes are the real values' sizes. The run's counters are deleted
    at the end.
    """
    from course.labs.live import live_step, new_run_id
    from library.cache.metrics import metrics_reset

    count, seed = int_param(params, "requests"), int_param(params, "seed")
    capacities = int_list_param(params, "capacities")
    catalogue = LiveCatalogue.load()
    run = new_run_id()
    started = time.time()
    prefixes: list[str] = []

    def cache_for(label: str, capacity: int, *, with_year: bool) -> LiveCache:
        prefixes.append(f"lab-{run}-{label}-")
        return LiveCache(
            capacity, prefixes[-1], LiveOrigin(catalogue, with_year=with_year)
        )

    try:
        capacity_rows: list[list[Cell]] = []
        requests = workload(count, seed, CAPACITY_MIX)
        for i, capacity in enumerate(capacities):
            live_step(
                progress, 0.05 + 0.6 * i / len(capacities), f"capacity {capacity}"
            )
            cache_ = cache_for(f"c{capacity}", capacity, with_year=True)
            for kind, ident in requests:
                cache_.get(kind, ident)
            counts = _counts(cache_.prefix, started)
            hits, misses = _total(counts, "hits"), _total(counts, "misses")
            capacity_rows.append(
                [
                    capacity,
                    hits,
                    misses,
                    ratio_pct(hits, hits + misses),
                    _total(counts, "evictions"),
                    _total(counts, "origin_calls"),
                    _total(counts, "origin_ms_total"),
                ]
            )

        mixed = workload(count, seed, BREAKDOWN_MIX)
        size = int_param(params, "breakdown_capacity")
        live_step(progress, 0.7, "breakdown: every namespace cached")
        full = cache_for("full", size, with_year=False)
        for kind, ident in mixed:
            full.get(kind, ident)
        live_step(progress, 0.85, "breakdown: member histories not cached")
        lean = cache_for("lean", size, with_year=False)
        for kind, ident in mixed:
            if kind == "history":
                lean.bypass(kind, ident)
            else:
                lean.get(kind, ident)
        by_kind = _counts(full.prefix, started)
        lean_counts = _counts(lean.prefix, started)
    finally:
        for prefix in prefixes:
            for kind in NAMESPACES:
                metrics_reset(f"{prefix}{kind}")

    namespace_rows: list[list[Cell]] = []
    for name in NAMESPACES:
        m = by_kind.get(name)
        hits, misses = (m["hits"], m["misses"]) if m else (0, 0)
        namespace_rows.append(
            [name, hits + misses, hits, misses, ratio_pct(hits, hits + misses)]
        )
    hits, misses = _total(by_kind, "hits"), _total(by_kind, "misses")
    hit_bytes, miss_bytes = _total(by_kind, "hit_bytes"), _total(by_kind, "miss_bytes")
    book = lean_counts.get("book")
    book_hits, book_misses = (book["hits"], book["misses"]) if book else (0, 0)
    return {
        "live_capacity": table(
            [
                "capacity",
                "hits",
                "misses",
                "hit_ratio_pct",
                "evictions",
                "origin_queries",
                "origin_ms",
            ],
            capacity_rows,
        ),
        "live_namespaces": table(
            ["namespace", "requests", "hits", "misses", "hit_ratio_pct"],
            namespace_rows,
        ),
        "live_totals": table(
            [
                "request_hit_ratio_pct",
                "byte_hit_ratio_pct",
                "hit_bytes",
                "miss_bytes",
                "origin_queries",
            ],
            [
                [
                    ratio_pct(hits, hits + misses),
                    ratio_pct(hit_bytes, hit_bytes + miss_bytes),
                    hit_bytes,
                    miss_bytes,
                    _total(by_kind, "origin_calls"),
                ]
            ],
        ),
        "live_without_history": table(
            ["book_hit_ratio_pct", "evictions", "origin_queries"],
            [
                [
                    ratio_pct(book_hits, book_hits + book_misses),
                    _total(lean_counts, "evictions"),
                    _total(lean_counts, "origin_calls"),
                ]
            ],
        ),
    }


LAB = Lab(
    slug="cache-metrics",
    title="Cache Metrics",
    params=(
        Param(
            "requests",
            "int",
            2000,
            "requests in each workload",
            minimum=0,
            maximum=200_000,
        ),
        Param("seed", "int", 20250729, "generator seed", minimum=0, maximum=SEED_MAX),
        Param(
            "capacities",
            "int_list",
            [4, 8, 16, 32, 64, 128],
            "cache sizes to compare, one row each",
            minimum=1,
            maximum=1_000_000,
        ),
        Param(
            "breakdown_capacity",
            "int",
            64,
            "cache size of the namespace breakdown",
            minimum=1,
            maximum=1_000_000,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="capacity",
            label="capacity",
            values=("hit_ratio_pct",),
            title="Hit ratio as capacity grows",
            unit="%",
        ),
        Chart(
            table="namespaces",
            label="namespace",
            values=("hit_ratio_pct",),
            title="Hit ratio per namespace",
            unit="%",
        ),
    ),
)
