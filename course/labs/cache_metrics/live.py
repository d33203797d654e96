"""The live part of the cache-metrics lab: both workloads through the application's
bounded in-process tier, counts read back from its metrics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from course.labs.cache_metrics.model import (
    BREAKDOWN_MIX,
    CAPACITY_MIX,
    HOT_TITLES,
    NAMESPACES,
    Row,
    Value,
    ratio_pct,
    workload,
)
from course.labs.cache_metrics.params import CacheMetricsParams
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.dataset_shape import BRANCH_COUNT, MEMBER_COUNT
from course.labs.harness.live import live_step, new_run_id
from library import selectors
from library.cache.keys import cache_key
from library.cache.metrics import metrics_read, metrics_record, metrics_reset
from library.cache.store import LocalTier, encode
from library.models import Book, Branch, Member

if TYPE_CHECKING:
    from library.cache.metrics import NamespaceMetrics

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

        self.tier = LocalTier(max_entries=capacity)
        self.prefix = prefix
        self.origin = origin

    def namespace(self, kind: str) -> str:
        return f"{self.prefix}{kind}"

    def _produce(self, kind: str, ident: int) -> bytes:

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

    window = int(time.time() // 60 - since // 60) + 1
    return {
        name.removeprefix(prefix): metrics
        for name, metrics in metrics_read(window).items()
        if name.startswith(prefix)
    }


def _total(counts: dict[str, NamespaceMetrics], field_name: str) -> int:
    """Return one counter summed over the kinds (TypedDicts are read by name here)."""
    return sum(int(cast("dict[str, int]", m)[field_name]) for m in counts.values())


Counts = dict[str, "NamespaceMetrics"]


@dataclass(frozen=True)
class Measurement:
    """The application's metrics of each cache the run used, per kind of read."""

    by_capacity: list[tuple[int, Counts]]  # the capacity workload, one per size
    full: Counts  # the breakdown workload, every namespace cached
    lean: Counts  # the same, member histories answered by the origin


def measure(params: CacheMetricsParams, progress: Progress) -> Measurement:
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
        by_capacity: list[tuple[int, Counts]] = []
        requests = workload(params.requests, params.seed, CAPACITY_MIX)
        for i, capacity in enumerate(params.capacities):
            live_step(
                progress,
                0.05 + 0.6 * i / len(params.capacities),
                f"capacity {capacity}",
            )
            cache_ = cache_for(f"c{capacity}", capacity, with_year=True)
            for kind, ident in requests:
                cache_.get(kind, ident)
            by_capacity.append((capacity, _counts(cache_.prefix, started)))

        mixed = workload(params.requests, params.seed, BREAKDOWN_MIX)
        size = params.breakdown_capacity
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
        return Measurement(
            by_capacity=by_capacity,
            full=_counts(full.prefix, started),
            lean=_counts(lean.prefix, started),
        )
    finally:
        for prefix in prefixes:
            for kind in NAMESPACES:
                metrics_reset(f"{prefix}{kind}")


def tables(params: CacheMetricsParams, measured: Measurement) -> Tables:
    """The model's tables, from the counts the application's metrics recorded."""
    capacity_rows: list[list[Cell]] = []
    for capacity, counts in measured.by_capacity:
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
    by_kind, lean_counts = measured.full, measured.lean
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


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
