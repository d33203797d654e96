"""Lab for "Cache Strategies": cache-aside, write-through and write-behind compared.

Model part, ported from the lesson's two experiments:

1. ``strategies`` — one seeded workload of reads and shelf-count changes runs against
   three caches that differ only in what a write does: cache-aside writes the origin
   and drops the entry, write-through writes both, write-behind writes the cache and
   flushes the collected changes to the origin every ``flush_every`` writes. Counted:
   origin reads and writes, hits and misses, reads that returned a value other than
   the true one (``stale``), changes still waiting in the cache at the end
   (``pending``) and books whose origin row disagrees with the truth (``diverged``).
2. ``race`` — the four-step interleaving on book 7 where a cache-aside miss stores a
   value read before a concurrent write deleted the entry; fixed, as the course
   prints it.

The course keeps each origin in its own SQLite file. Here the origin is a dict of shelf
counts that counts its reads and writes: every statement the course issues is a
single-row read or overwrite by primary key, so a database would change no count.

The live part (``live``) runs the same workload and race on the real Redis and
the real book rows.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    LabError,
    Param,
    Params,
    Progress,
    Tables,
    float_param,
    int_param,
    table,
)
from course.labs.jsnum import SEED_MAX, JsLcg

CATALOGUE_BOOKS = 60  # the lesson's book table holds 60 titles
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


def model(params: Params, progress: Progress) -> Tables:
    progress(0.05, "building the workload")
    operations = workload(
        ops=int_param(params, "ops"),
        seed=int_param(params, "seed"),
        write_ratio=float_param(params, "write_ratio"),
        hot_books=int_param(params, "hot_books"),
    )
    flush_every = int_param(params, "flush_every")
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
        from course.labs.live_store import shelf_read

        self.reads += 1
        return shelf_read(book)

    def write(self, book: int, on_shelf: int) -> None:
        from course.labs.live_store import shelf_write

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
        from course.labs.live_store import SHELF, run_tenant

        return SHELF.key(
            tenant=run_tenant(self.run), criteria={"id": book, "s": self.name}
        )

    @property
    def dirty_key(self) -> str:
        from course.labs.live_store import SHELF, run_tenant

        return SHELF.key(
            tenant=run_tenant(self.run), criteria={"dirty": 1, "s": self.name}
        )

    def read(self, book: int) -> int:
        from course.labs.live_store import LAB_NAMESPACE
        from library.cache.store import cache_aside

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
        from course.labs.live_store import LAB_NAMESPACE
        from library.cache.metrics import cache_redis
        from library.cache.store import cache_delete, write_through

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
        from library.cache.metrics import cache_redis

        # Read and clear in one MULTI: a change queued between the two would be lost.
        pipe = cache_redis().pipeline(transaction=True)
        pipe.hgetall(self.dirty_key)
        pipe.delete(self.dirty_key)
        queued, _ = pipe.execute()
        for book, value in queued.items():
            self.origin.write(int(book), int(value))

    def unflushed(self) -> int:
        from library.cache.metrics import cache_redis

        if self.name != "write-behind":
            return 0
        return int(cache_redis().hlen(self.dirty_key))


def live_strategy_row(
    name: str, run: str, operations: list[Operation], flush_every: int
) -> list[Cell]:
    """Run one strategy on the real store and return its ``live_strategies`` row.

    The touched books start at the lesson's three copies, as each model run does.
    """
    from course.labs.live_store import shelf_read, shelf_write

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


@dataclass
class LiveRace:
    """The race of the lesson, between two real threads on the real store."""

    run: str
    rows: list[list[Cell]] = field(default_factory=list)
    outcome: list[list[Cell]] = field(default_factory=list)

    def note(self, form: str, action: str, key: str) -> None:
        from course.labs.live_store import shelf_read
        from library.cache.metrics import cache_redis
        from library.cache.store import decode

        raw = cache_redis().get(key)
        shown: Cell = "-"
        if raw is not None:
            value = decode(cast(bytes, raw))
            shown = value["on_shelf"] if isinstance(value, dict) else value
        step = sum(1 for row in self.rows if row[0] == form) + 1
        self.rows.append([form, step, action, shown, shelf_read(RACE_BOOK)])

    def play(
        self,
        form: str,
        key_now: Callable[[], str],
        fill: Callable[[str, Callable[[], object]], object],
        origin_value: Callable[[], object],
        read: Callable[[], int],
        after_write: Callable[[str], None],
    ) -> None:
        """Replay the interleaving with ``form``'s key; count stale follow-up reads.

        1. Request A misses and reads the origin on its thread, then waits.
        2. Request B, on a thread of its own, writes the origin and does what the
           form does after a write (delete the entry, or nothing: the version moved).
        3. A is let go and stores the value it read before B's write.
        4. RACE_READS reads through the form's read path, each checked against the
           database.
        """
        from course.labs.live_store import Request, shelf_read, shelf_write

        a_has_value = threading.Event()
        b_done = threading.Event()
        key_a = key_now()

        def slow_origin() -> object:
            value = origin_value()
            a_has_value.set()
            # B's whole request runs now; a miss load is rarely this slow, and the
            # wait only makes the unlucky order certain instead of occasional.
            b_done.wait(10)
            return value

        a = Request("A", lambda: fill(key_a, slow_origin))
        a.start()
        if not a_has_value.wait(10):
            a.finish(0.1)
            raise LabError("live: request A never reached the origin")
        held = shelf_read(RACE_BOOK)
        self.note(form, "A missed and read the origin; it holds the value", key_a)

        def write() -> None:
            shelf_write(RACE_BOOK, held - 1)
            after_write(key_a)

        b = Request("B", write)
        b.start()
        try:
            b.finish()
        finally:
            b_done.set()
        self.note(form, f"B wrote the origin and {_AFTER_WRITE[form]}", key_now())
        a.finish()
        self.note(form, "A stored the value it read before B's write", key_now())
        stale = sum(1 for _ in range(RACE_READS) if read() != shelf_read(RACE_BOOK))
        self.note(
            form, f"{stale} of the following {RACE_READS} reads were stale", key_now()
        )
        self.outcome.append([form, RACE_READS, stale, int(key_a != key_now())])


_AFTER_WRITE = {
    "plain key": "dropped the cache entry",
    "version in the key": "left the cache alone (the version moved)",
}


def live_race(run: str, race: LiveRace) -> None:
    """Play the race with the lesson's key, then with the application's book key."""
    from course.labs.live_store import (
        LAB_NAMESPACE,
        book_key,
        book_key_checked,
        shelf_key,
        shelf_read,
        shelf_write,
    )
    from library.cache import reads
    from library.cache.store import cache_aside, cache_delete

    def reset() -> None:
        if shelf_read(RACE_BOOK) != COPIES_ON_SHELF:
            shelf_write(RACE_BOOK, COPIES_ON_SHELF)

    plain = shelf_key(run, RACE_BOOK)

    def plain_fill(key: str, produce: Callable[[], object]) -> object:
        return cache_aside(
            key=key,
            namespace=LAB_NAMESPACE,
            produce=produce,
            lifetime_s=LIVE_LIFETIME_S,
        )

    def plain_read() -> int:
        value: int = cache_aside(
            key=plain,
            namespace=LAB_NAMESPACE,
            produce=lambda: shelf_read(RACE_BOOK),
            lifetime_s=LIVE_LIFETIME_S,
        )
        return value

    def plain_delete(key: str) -> None:
        if not cache_delete(key, namespace=LAB_NAMESPACE):
            raise LabError("live: Redis refused the race's delete")

    reset()
    race.play(
        "plain key",
        lambda: plain,
        plain_fill,
        lambda: shelf_read(RACE_BOOK),
        plain_read,
        plain_delete,
    )

    reset()
    book_key_checked(RACE_BOOK)  # the lab's key is book_detail's key, or it stops

    def versioned_fill(key: str, produce: Callable[[], object]) -> object:
        # What book_detail does on a miss, with A's slow production in the middle.
        return cache_aside(
            key=key,
            namespace=reads.BOOK.namespace,
            produce=produce,
            lifetime_s=reads.BOOK_LIFETIME_S,
        )

    def versioned_read() -> int:
        found = reads.book_detail(book_id=RACE_BOOK)
        if found is None:
            raise LabError(f"live: book #{RACE_BOOK} vanished during the run")
        return found.book.on_shelf

    def versioned_origin() -> object:
        return reads._book_origin(RACE_BOOK)  # the producer book_detail itself uses

    orphan = book_key(RACE_BOOK)
    try:
        race.play(
            "version in the key",
            lambda: book_key(RACE_BOOK),
            versioned_fill,
            versioned_origin,
            versioned_read,
            lambda key: None,
        )
    finally:
        cache_delete(orphan, namespace=reads.BOOK.namespace)  # A's old value


def live(params: Params, progress: Progress) -> Tables:
    """Run the three strategies and the race on the real Redis and the real books.

    1. ``live_strategies`` (columns as ``strategies``): the same seeded workload,
       sequentially, on books 1..``hot_books``. The cache is the application's Redis
       through ``library.cache.store`` (``cache_aside`` reads, ``cache_delete`` and
       ``write_through`` writes); the origin is each book's ``on_shelf`` row, read
       with one query and written with ``library.services.stock_correct``. Every
       count is a count of real calls, so with nothing else touching those books the
       row equals the model's.
    2. ``live_race`` (key_form, step, action, cache, origin): requests A and B as
       two threads against book 7 (reset to three copies), with the lesson's plain
       key and then with ``library.cache.reads.book_detail``'s versioned key.
       ``cache`` is what the key the next reader asks for holds (``-``: nothing).
       ``live_race_outcome`` (key_form, reads, stale, key_moved): how many of the
       following reads were stale, and whether the write moved readers to a new key.

    The books' shelf counts are put back and the run's entries deleted at the end.
    """
    from course.labs.live import live_step, new_run_id
    from course.labs.live_store import require_books, run_keys, shelves_restored

    operations = workload(
        ops=int_param(params, "ops"),
        seed=int_param(params, "seed"),
        write_ratio=float_param(params, "write_ratio"),
        hot_books=int_param(params, "hot_books"),
    )
    flush_every = int_param(params, "flush_every")
    books = sorted({op.book for op in operations} | {RACE_BOOK})
    require_books(books)
    run = new_run_id()
    rows: list[list[Cell]] = []
    race = LiveRace(run)
    with run_keys(run), shelves_restored(books):
        for i, name in enumerate(STRATEGY_NAMES):
            live_step(progress, 0.1 + 0.25 * i, f"strategies on Redis: {name}")
            rows.append(live_strategy_row(name, run, operations, flush_every))
        live_step(progress, 0.85, "race: two threads, plain key and versioned key")
        live_race(run, race)
    return {
        "live_strategies": table(LIVE_STRATEGY_COLUMNS, rows),
        "live_race": table(
            ["key_form", "step", "action", "cache", "origin"], race.rows
        ),
        "live_race_outcome": table(
            ["key_form", "reads", "stale", "key_moved"], race.outcome
        ),
    }


LAB = Lab(
    slug="cache-strategies",
    title="Cache Strategies",
    params=(
        Param(
            "ops", "int", 1200, "operations in the workload", minimum=0, maximum=200_000
        ),
        Param("seed", "int", 20250729, "generator seed", minimum=0, maximum=SEED_MAX),
        Param(
            "write_ratio",
            "float",
            0.15,
            "share of operations that change a shelf count",
            minimum=0,
            maximum=1,
        ),
        Param(
            "hot_books",
            "int",
            12,
            "books the workload touches (the catalogue has 60)",
            minimum=1,
            maximum=CATALOGUE_BOOKS,
        ),
        Param(
            "flush_every",
            "int",
            20,
            "write-behind flushes after this many writes",
            minimum=1,
            maximum=200_000,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="strategies",
            label="strategy",
            values=("origin_reads", "origin_writes"),
            title="Traffic reaching the origin",
        ),
        Chart(
            table="strategies",
            label="strategy",
            values=("pending", "diverged"),
            title="What a crash at the end would lose",
        ),
    ),
)
