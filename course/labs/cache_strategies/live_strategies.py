"""The live strategies of the cache-strategies lab: the workload through the real
store's three write paths (cache-aside, write-through, write-behind) on the real
Redis and book rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from course.labs.cache_strategies.model import COPIES_ON_SHELF, Counters, Operation
from course.labs.harness.base import Cell, LabError
from course.labs.harness.live_store import (
    LAB_NAMESPACE,
    SHELF,
    run_tenant,
    shelf_read,
    shelf_write,
)
from library.cache.metrics import cache_redis
from library.cache.store import cache_aside, cache_delete, write_through

# --- live part ----------------------------------------------------------------------

LIVE_LIFETIME_S = 600  # long enough that no entry expires during a run
LIVE_STRATEGY_COLUMNS = [
    "strategy",
    "origin_reads",
    "origin_writes",
    "hits",
    "misses",
    "stale",
    "pending",
    "diverged",
]


class LiveOrigin:
    """The real shelf counts; ``read`` and ``write`` are the calls that count."""

    def __init__(self) -> None:
        self.reads = 0
        self.writes = 0

    def read(self, book: int) -> int:

        self.reads += 1
        return shelf_read(book)

    def write(self, book: int, on_shelf: int) -> None:

        self.writes += 1
        shelf_write(book, on_shelf)


@dataclass
class LiveStrategy:
    """One strategy on the real Redis: cache-aside reads, the strategy's own writes.

    Misses are counted where they happen, in the production the read had to call.
    Write-behind keeps its not-yet-flushed changes in a Redis hash beside the cache
    entries (the cache is where they live until the flush), not in this process.
    """

    name: str
    run: str
    origin: LiveOrigin
    flush_every: int
    counters: Counters = field(default_factory=Counters)
    _writes: int = 0

    def key(self, book: int) -> str:

        return SHELF.key(
            tenant=run_tenant(self.run), criteria={"id": book, "s": self.name}
        )

    @property
    def dirty_key(self) -> str:

        return SHELF.key(
            tenant=run_tenant(self.run), criteria={"dirty": 1, "s": self.name}
        )

    def read(self, book: int) -> int:

        produced = False

        def produce() -> int:
            nonlocal produced
            produced = True
            return self.origin.read(book)

        value: int = cache_aside(
            key=self.key(book),
            namespace=LAB_NAMESPACE,
            produce=produce,
            lifetime_s=LIVE_LIFETIME_S,
        )
        if produced:
            self.counters.misses += 1
        else:
            self.counters.hits += 1
        return value

    def write(self, book: int, on_shelf: int) -> None:

        if self.name == "cache-aside":
            # Origin first, then the delete: the next read reloads the new count.
            self.origin.write(book, on_shelf)
            if not cache_delete(self.key(book), namespace=LAB_NAMESPACE):
                raise LabError("live: Redis refused a cache-aside delete")
            return
        if self.name == "write-behind":
            cache_redis().hset(self.dirty_key, str(book), on_shelf)
        else:
            self.origin.write(book, on_shelf)
        stored = write_through(
            key=self.key(book),
            namespace=LAB_NAMESPACE,
            value=on_shelf,
            lifetime_s=LIVE_LIFETIME_S,
        )
        if not stored:
            raise LabError(f"live: Redis refused a {self.name} store")
        if self.name == "write-behind":
            self._writes += 1
            if self._writes % self.flush_every == 0:
                self.flush()

    def flush(self) -> None:
        """Write the collected changes to the origin, one write per book."""

        # Read and clear in one MULTI: a change queued between the two would be lost.
        pipe = cache_redis().pipeline(transaction=True)
        pipe.hgetall(self.dirty_key)
        pipe.delete(self.dirty_key)
        queued, _ = pipe.execute()
        for book, value in queued.items():
            self.origin.write(int(book), int(value))

    def unflushed(self) -> int:

        if self.name != "write-behind":
            return 0
        return int(cache_redis().hlen(self.dirty_key))


def live_strategy_row(
    name: str, run: str, operations: list[Operation], flush_every: int
) -> list[Cell]:
    """Run one strategy on the real store and return its ``live_strategies`` row.

    The touched books start at the lesson's three copies, as each model run does.
    """

    books = sorted({op.book for op in operations})
    for book in books:
        if shelf_read(book) != COPIES_ON_SHELF:
            shelf_write(book, COPIES_ON_SHELF)
    strategy = LiveStrategy(name, run, LiveOrigin(), flush_every)
    truth: dict[int, int] = {}
    for op in operations:
        # The database's value is looked up (uncounted) the first time a book is
        # met: bookkeeping of the experiment, not traffic of the strategy.
        current = truth[op.book] if op.book in truth else shelf_read(op.book)
        truth.setdefault(op.book, current)
        if not op.is_write:
            if strategy.read(op.book) != current:
                strategy.counters.stale += 1
            continue
        truth[op.book] = max(0, current + op.delta)
        strategy.write(op.book, truth[op.book])
    pending = strategy.unflushed()
    diverged = sum(1 for book, value in truth.items() if shelf_read(book) != value)
    c = strategy.counters
    o = strategy.origin
    return [name, o.reads, o.writes, c.hits, c.misses, c.stale, pending, diverged]
