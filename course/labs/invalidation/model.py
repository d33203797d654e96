"""The model part of the invalidation lab: time-to-live, an outbox consumer and a
version in the key, compared on the cache-strategies workload.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from course.labs.cache_strategies import Operation, ShelfOrigin, workload
from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.invalidation.params import InvalidationParams

WRITE_RATIO = 0.15
HOT_BOOKS = 12
FOREVER = math.inf


class OutboxOrigin(ShelfOrigin):
    """Shelf counts plus the outbox a write appends to in the same step."""

    def __init__(self) -> None:
        super().__init__()
        self.outbox: list[int] = []  # book ids of messages not yet consumed

    def change(self, book: int, delta: int) -> None:
        self.write(book, max(0, self.peek(book) + delta))
        self.outbox.append(book)


@dataclass
class Policy:
    """How a policy names an entry, how long it lives and what a write does."""

    label: str

    def key(self, book: int) -> str:
        return f"book:{book}"

    def expires(self, now: int) -> float:
        return FOREVER

    def on_write(self, book: int) -> None:
        """React to a write in the same step (most policies do nothing)."""

    def after_tick(self, origin: OutboxOrigin, cache: dict[str, Entry]) -> None:
        """Run whatever happens in the background once per tick."""


@dataclass
class Entry:
    value: int
    valid_until: float


@dataclass
class TimeToLive(Policy):
    lifetime: int = 0

    def expires(self, now: int) -> float:
        return now + self.lifetime


@dataclass
class OutboxConsumer(Policy):
    delay: int = 1
    _ticks: int = 0

    def after_tick(self, origin: OutboxOrigin, cache: dict[str, Entry]) -> None:
        self._ticks += 1
        if self._ticks % self.delay:
            return
        # The consumer only wakes every `delay` ticks: until then a changed book's
        # entry keeps answering with the old count. That gap is the stale window.
        for book in origin.outbox:
            cache.pop(self.key(book), None)
        origin.outbox.clear()


@dataclass
class VersionInKey(Policy):
    _versions: dict[int, int] = field(default_factory=dict)

    def key(self, book: int) -> str:
        return f"book:v{self._versions.get(book, 1)}:{book}"

    def on_write(self, book: int) -> None:
        self._versions[book] = self._versions.get(book, 1) + 1


def policy_row(policy: Policy, operations: list[Operation]) -> list[Cell]:
    """Run the workload under one policy and return its ``invalidation`` row."""
    origin = OutboxOrigin()
    cache: dict[str, Entry] = {}
    hits = misses = stale = 0
    for now, op in enumerate(operations, start=1):
        if op.is_write:
            origin.change(op.book, op.delta)
            policy.on_write(op.book)
        else:
            key = policy.key(op.book)
            entry = cache.get(key)
            if entry is not None and entry.valid_until > now:
                hits += 1
                value = entry.value
            else:
                misses += 1
                value = origin.read(op.book)
                cache[key] = Entry(value, policy.expires(now))
            if value != origin.peek(op.book):
                stale += 1
        policy.after_tick(origin, cache)
    return [policy.label, origin.reads, hits, misses, stale]


def policies(lifetimes: list[int], delays: list[int]) -> list[Callable[[], Policy]]:
    """Return one factory per row, in the course's order: time, event, version."""
    made: list[Callable[[], Policy]] = []
    for lifetime in lifetimes:
        made.append(
            partial(TimeToLive, f"time (lifetime={lifetime})", lifetime=lifetime)
        )
    for delay in delays:
        made.append(partial(OutboxConsumer, f"event (delay={delay})", delay=delay))
    made.append(partial(VersionInKey, "version"))
    return made


def orphan_rows() -> tuple[list[list[Cell]], list[list[Cell]]]:
    """Return the ``orphans`` row and the keys behind it.

    One book entry and two list pages of branch 2 are cached; then book 7's version
    and branch 2's generation go up, and book 7 is read (and stored) again. Nothing is
    deleted: the old entries stay until a lifetime or eviction removes them.
    """
    versions = {7: 1}
    generation = {2: 1}

    def book_key(book: int) -> str:
        return f"book:v{versions[book]}:{book}"

    def page_key(branch: int, page: int) -> str:
        return f"branch:{branch}:g{generation[branch]}:list:{page}"

    cache: dict[str, object] = {
        book_key(7): {"on_shelf": 3},
        page_key(2, 1): ["Book 5", "Book 8"],
        page_key(2, 2): ["Book 11"],
    }
    versions[7] += 1
    generation[2] += 1
    cache[book_key(7)] = {"on_shelf": 2}
    reachable = {book_key(7), page_key(2, 1), page_key(2, 2)}
    keys: list[list[Cell]] = [
        [key, "reachable" if key in reachable else "orphaned"] for key in cache
    ]
    orphaned = sum(1 for key in cache if key not in reachable)
    return [[len(cache), orphaned]], keys


def model(params: InvalidationParams, progress: Progress) -> Tables:
    operations = workload(
        ops=params.ops,
        seed=params.seed,
        write_ratio=WRITE_RATIO,
        hot_books=HOT_BOOKS,
    )
    factories = policies(params.lifetimes, params.delays)
    rows: list[list[Cell]] = []
    for i, make in enumerate(factories):
        policy = make()
        progress(0.05 + 0.85 * i / len(factories), f"invalidation: {policy.label}")
        rows.append(policy_row(policy, operations))
    progress(0.92, "orphans: version and generation in the key")
    orphans, keys = orphan_rows()
    return {
        "invalidation": table(
            ["invalidation", "origin_reads", "hits", "misses", "stale"], rows
        ),
        "orphans": table(["entries", "orphaned"], orphans),
        "orphan_keys": table(["key", "state"], keys),
    }
