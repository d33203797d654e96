"""The model part of the cache-strategies lab: the seeded workload, the counting shelf
origin and the three write strategies, plus the lesson's race.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from course.labs.cache_strategies.params import CATALOGUE_BOOKS, CacheStrategiesParams
from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.jsnum import JsLcg

COPIES_ON_SHELF = 3  # ...each starting with three copies on the shelf
RACE_BOOK = 7
RACE_READS = 50


@dataclass(frozen=True)
class Operation:
    """One step of the workload: a read, or a +1/-1 change of a shelf count."""

    book: int
    delta: int = 0  # 0 for a read

    @property
    def is_write(self) -> bool:
        return self.delta != 0


def workload(
    *, ops: int, seed: int, write_ratio: float, hot_books: int
) -> list[Operation]:
    """Return the seeded operation list every strategy (and ``invalidation``) runs.

    The generator is drawn in the course's order: write-or-read, then the book, then
    (writes only) the direction of the change. A read therefore uses two draws and a
    write three, which is why the sequences differ as soon as ``write_ratio`` does.
    """
    rng = JsLcg(seed)
    operations: list[Operation] = []
    for _ in range(ops):
        writes = rng.random() < write_ratio
        book = rng.below(hot_books) + 1
        if writes:
            operations.append(Operation(book, -1 if rng.random() < 0.5 else 1))
        else:
            operations.append(Operation(book))
    return operations


class ShelfOrigin:
    """The origin's shelf counts; ``read`` and ``write`` are the calls that count."""

    def __init__(self) -> None:
        self._rows = dict.fromkeys(range(1, CATALOGUE_BOOKS + 1), COPIES_ON_SHELF)
        self.reads = 0
        self.writes = 0

    def read(self, book: int) -> int:
        self.reads += 1
        return self._rows[book]

    def write(self, book: int, on_shelf: int) -> None:
        self.writes += 1
        self._rows[book] = on_shelf

    def peek(self, book: int) -> int:
        """Look without counting: the experiment's own bookkeeping, not traffic."""
        return self._rows[book]


@dataclass
class Counters:
    hits: int = 0
    misses: int = 0
    stale: int = 0


@dataclass
class Strategy(ABC):
    """Cache-aside reads; subclasses decide what a write does to cache and origin."""

    origin: ShelfOrigin
    counters: Counters
    cache: dict[int, int] = field(default_factory=dict)

    def read(self, book: int) -> int:
        if book in self.cache:
            self.counters.hits += 1
            return self.cache[book]
        self.counters.misses += 1
        value = self.origin.read(book)
        self.cache[book] = value
        return value

    @abstractmethod
    def write(self, book: int, on_shelf: int) -> None:
        """Apply a shelf-count change the way this strategy does."""

    def unflushed(self) -> int:
        """Return how many changes exist only in the cache when the run ends."""
        return 0


class CacheAside(Strategy):
    def write(self, book: int, on_shelf: int) -> None:
        # The next read reloads the entry; that reload is this strategy's cost.
        self.origin.write(book, on_shelf)
        self.cache.pop(book, None)


class WriteThrough(Strategy):
    def write(self, book: int, on_shelf: int) -> None:
        self.origin.write(book, on_shelf)
        self.cache[book] = on_shelf


@dataclass
class WriteBehind(Strategy):
    flush_every: int = 20
    _queued: dict[int, int] = field(default_factory=dict)
    _writes: int = 0

    def write(self, book: int, on_shelf: int) -> None:
        # Only the latest value per book is queued: repeated changes to one book
        # between two flushes reach the origin as one write.
        self.cache[book] = on_shelf
        self._queued[book] = on_shelf
        self._writes += 1
        if self._writes % self.flush_every == 0:
            for queued_book, value in self._queued.items():
                self.origin.write(queued_book, value)
            self._queued.clear()

    def unflushed(self) -> int:
        return len(self._queued)


STRATEGY_NAMES = ("cache-aside", "write-through", "write-behind")


def _strategy(name: str, origin: ShelfOrigin, flush_every: int) -> Strategy:
    counters = Counters()
    if name == "cache-aside":
        return CacheAside(origin, counters)
    if name == "write-through":
        return WriteThrough(origin, counters)
    return WriteBehind(origin, counters, flush_every=flush_every)


def strategy_row(
    name: str, operations: list[Operation], flush_every: int
) -> list[Cell]:
    """Run one strategy over the workload and return its ``strategies`` row."""
    origin = ShelfOrigin()
    strategy = _strategy(name, origin, flush_every)
    # What each touched book's shelf count really is after every change, starting
    # from the origin's value the first time the workload meets the book.
    truth: dict[int, int] = {}
    for op in operations:
        if not op.is_write:
            seen = strategy.read(op.book)
            expected = truth.setdefault(op.book, origin.peek(op.book))
            if seen != expected:
                strategy.counters.stale += 1
            continue
        current = truth.setdefault(op.book, origin.peek(op.book))
        truth[op.book] = max(0, current + op.delta)
        strategy.write(op.book, truth[op.book])
    pending = strategy.unflushed()
    diverged = sum(1 for book, value in truth.items() if origin.peek(book) != value)
    c = strategy.counters
    return [
        name,
        origin.reads,
        origin.writes,
        c.hits,
        c.misses,
        c.stale,
        pending,
        diverged,
    ]


def race_rows() -> list[list[Cell]]:
    """Replay the cache-aside race on one book and show cache and origin per step."""
    origin = ShelfOrigin()
    cache: dict[int, int] = {}
    rows: list[list[Cell]] = []

    def note(action: str) -> None:
        shown: Cell = cache.get(RACE_BOOK, "-")
        rows.append([len(rows) + 1, action, shown, origin.peek(RACE_BOOK)])

    held = origin.read(RACE_BOOK)  # request A: a miss, the value is now in hand
    note("A missed and read the origin; it holds the value, not stored yet")
    origin.write(RACE_BOOK, held - 1)  # request B: one copy lent out
    cache.pop(RACE_BOOK, None)
    note("B wrote the origin and dropped the cache entry")
    cache[RACE_BOOK] = held  # A finally stores what it read before B's write
    note("A stored its old value in the cache")
    stale = 0
    for _ in range(RACE_READS):
        value = cache[RACE_BOOK] if RACE_BOOK in cache else origin.peek(RACE_BOOK)
        if value != origin.peek(RACE_BOOK):
            stale += 1
    note(f"{stale} of the following {RACE_READS} reads returned the old value")
    return rows


def model(params: CacheStrategiesParams, progress: Progress) -> Tables:
    progress(0.05, "building the workload")
    operations = workload(
        ops=params.ops,
        seed=params.seed,
        write_ratio=params.write_ratio,
        hot_books=params.hot_books,
    )
    flush_every = params.flush_every
    rows: list[list[Cell]] = []
    for i, name in enumerate(STRATEGY_NAMES):
        progress(0.1 + 0.25 * i, f"strategies: {name}")
        rows.append(strategy_row(name, operations, flush_every))
    progress(0.9, "race: a miss load meets a write")
    return {
        "strategies": table(
            [
                "strategy",
                "origin_reads",
                "origin_writes",
                "hits",
                "misses",
                "stale",
                "pending",
                "diverged",
            ],
            rows,
        ),
        "race": table(["step", "action", "cache", "origin"], race_rows()),
    }
