"""Lab for "Invalidation": time-, event- and version-based eviction on one workload.

Model part, ported from the lesson's two experiments:

1. ``invalidation`` — the ``cache-strategies`` workload (15 % writes over 12 books,
   ``ops`` operations from ``seed``) on a clock that advances one tick per operation.
   Writes change the origin only; how the cache learns about them is the policy:

   - ``time (lifetime=N)`` — an entry stored at tick t answers reads while the clock
     is below t + N; writes leave the cache alone;
   - ``event (delay=N)`` — every write leaves a message in an outbox in the same
     step; a consumer that wakes every N ticks drops the entries the messages name;
   - ``version`` — a write raises the book's version, which is part of the key, so
     the old entry is simply never asked for again.

   A read is ``stale`` when the value it returns differs from the origin's row.
2. ``orphans`` — after one book version and one branch generation are raised, how
   many of the cache's entries no key can reach any more. Fixed, as printed.

The course keeps the origin and its outbox in SQLite so that the row and the message
commit together. In this single-threaded model nothing can observe the gap between
the two, so the origin is a dict and the outbox a list; only counts are reported.
The keys of ``orphans`` keep the lesson's hand-built shapes on purpose: building them
properly is the next lesson, whose lab uses ``library.cache.keys``.

The live part (``live``) changes one real book and times three real read paths,
one of them retired by the outbox through a real rq worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

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
from course.labs.cache_strategies import Operation, ShelfOrigin, workload
from course.labs.jsnum import SEED_MAX

if TYPE_CHECKING:
    from course.labs.live import LiveSystem

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


def model(params: Params, progress: Progress) -> Tables:
    operations = workload(
        ops=int_param(params, "ops"),
        seed=int_param(params, "seed"),
        write_ratio=WRITE_RATIO,
        hot_books=HOT_BOOKS,
    )
    factories = policies(
        int_list_param(params, "lifetimes"), int_list_param(params, "delays")
    )
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


# --- live part ----------------------------------------------------------------------

LIVE_LIFETIME_S = 1  # the shortest lifetime cache_aside takes (whole seconds)
LIVE_READ_EVERY_S = 0.01
LIVE_READS_AFTER_FRESH = 5  # fresh reads after the first, to show the entry is back
LIVE_WATCH_TIMEOUT_S = 15.0
INVALIDATION_SUBSCRIPTION = "cache_invalidation"
LIVE_COLUMNS = ["invalidation", "reads", "hits", "misses", "stale", "delay_ms"]

# One read of the watched value: (what the reader was served, whether it was a hit).
Read = Callable[[], tuple[int, bool]]


def _watch(label: str, read: Read, expected: int, committed_at: float) -> list[Cell]:
    """Read every LIVE_READ_EVERY_S from the commit on; return the row.

    ``delay_ms`` is the time from the write's commit to the first read that saw the
    new value; the watch goes on for LIVE_READS_AFTER_FRESH more reads.
    """
    import time

    reads = hits = stale = 0
    delay_ms: float | None = None
    fresh_reads = 0
    deadline = committed_at + LIVE_WATCH_TIMEOUT_S
    while fresh_reads <= LIVE_READS_AFTER_FRESH:
        value, hit = read()
        now = time.monotonic()
        reads += 1
        hits += hit
        if value != expected:
            stale += 1
        else:
            fresh_reads += 1
            if delay_ms is None:
                delay_ms = round((now - committed_at) * 1000, 1)
        if now > deadline:
            raise LabError(
                f"live: {label} still served the old value after "
                f"{LIVE_WATCH_TIMEOUT_S:g} s"
            )
        time.sleep(LIVE_READ_EVERY_S)
    return [label, reads, hits, reads - hits, stale, delay_ms]


def _change(book: int) -> tuple[int, float, int]:
    """Add a copy to the book's shelf through the library's service.

    Return the new count, the monotonic time of the commit and the id of the outbox
    message the change left.
    """
    import time

    from course.labs.live_store import shelf_read, shelf_write
    from messaging.models import OutboxMessage
    from messaging.registry import MessageType

    new = shelf_read(book) + 1
    shelf_write(book, new)
    committed_at = time.monotonic()
    message = (
        OutboxMessage.objects.filter(type=MessageType.STOCK_CORRECTED, key=str(book))
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    if message is None:
        raise LabError(f"live: the change of book #{book} left no outbox message")
    return new, committed_at, message


def _invalidated(message: int) -> bool:
    """Return whether the cache_invalidation delivery of ``message`` is done."""
    from messaging.models import Delivery

    return bool(
        Delivery.objects.filter(
            message_id=message,
            subscription=INVALIDATION_SUBSCRIPTION,
            status=Delivery.Status.DONE,
        ).exists()
    )


def _live_time(run: str, book: int) -> list[Cell]:
    """A lab entry with a one-second lifetime and nothing else retiring it."""
    from course.labs.live_store import LAB_NAMESPACE, shelf_key, shelf_read
    from library.cache.store import cache_aside

    def read() -> tuple[int, bool]:
        produced = False

        def produce() -> int:
            nonlocal produced
            produced = True
            return shelf_read(book)

        value: int = cache_aside(
            key=shelf_key(run, book),
            namespace=LAB_NAMESPACE,
            produce=produce,
            lifetime_s=LIVE_LIFETIME_S,
        )
        return value, not produced

    read()  # store the entry; its second of life starts now
    new, committed_at, _ = _change(book)
    return _watch(f"time (lifetime={LIVE_LIFETIME_S} s)", read, new, committed_at)


def _list_key(branch: int, page: int) -> str:
    """Return the key ``branch_books_page`` reads for the page right now."""
    from library.cache.reads import LIST, branch_tenant
    from library.cache.store import generation_get

    tenant = branch_tenant(branch)
    return LIST.key(
        tenant=tenant,
        generation=generation_get(LIST.namespace, tenant),
        criteria={"page": page},
    )


def _live_event(book: int, branch: int, page: int, system: LiveSystem) -> list[Cell]:
    """The branch's catalogue page, retired by the outbox's cache_invalidation."""
    from course.labs.live import wait_until
    from library.cache.metrics import cache_redis
    from library.cache.reads import branch_books_page

    def read() -> tuple[int, bool]:
        hit = bool(cache_redis().exists(_list_key(branch, page)))
        found = branch_books_page(branch_id=branch, page=page)
        if found is None:
            raise LabError(f"live: branch {branch} vanished during the run")
        for row in found[1].object_list:
            if row.pk == book:
                return row.on_shelf, hit
        raise LabError(f"live: book #{book} is not on page {page} of its branch")

    read()
    if not cache_redis().exists(_list_key(branch, page)):
        raise LabError(
            "live: library.cache.reads.branch_books_page no longer stores under "
            "the key this lab builds (course/labs/invalidation.py: _list_key)"
        )
    new, committed_at, message = _change(book)
    row = _watch("event (outbox, rq worker)", read, new, committed_at)
    # The fresh value must have come from the worker's bump, not from a lifetime.
    wait_until(
        lambda: _invalidated(message),
        what="the cache_invalidation delivery",
        timeout=30,
        system=system,
    )
    return row


def _live_version(book: int) -> list[Cell]:
    """The application's book detail, whose key carries the book's version."""
    from course.labs.live_store import book_key, book_key_checked
    from library.cache.metrics import cache_redis
    from library.cache.reads import book_detail

    book_key_checked(book)

    def read() -> tuple[int, bool]:
        hit = bool(cache_redis().exists(book_key(book)))
        found = book_detail(book_id=book)
        if found is None:
            raise LabError(f"live: book #{book} vanished during the run")
        return found.book.on_shelf, hit

    read()
    new, committed_at, _ = _change(book)
    return _watch("version (book_detail)", read, new, committed_at)


def _catalogue_page(book: int) -> tuple[int, int]:
    """Return the book's branch and the catalogue page that lists it."""
    from library import selectors
    from library.models import Book

    branch = Book.objects.filter(pk=book).values_list("branch_id", flat=True).get()
    ordered = list(
        Book.objects.filter(branch_id=branch)
        .order_by("title", "id")
        .values_list("pk", flat=True)
    )
    return branch, ordered.index(book) // selectors.BOOKS_PER_PAGE + 1


def _wait_quiet(book: int, system: LiveSystem) -> None:
    """Wait until the worker has finished with the book's earlier changes.

    A bump still on its way would retire the page just stored and pass for the
    lab's own event, and a drain in progress holds the database's write lock.
    """
    from course.labs.live import wait_until

    wait_until(
        lambda: _quiet(book),
        what="the deliveries of the book's earlier changes",
        timeout=30,
        system=system,
    )


def _quiet(book: int) -> bool:
    """Return whether every library change of the book is relayed and delivered."""
    from messaging.models import Delivery, OutboxMessage
    from messaging.registry import LIBRARY_TYPES

    # The key alone is not enough: lab probes use small integers as keys too.
    changes = OutboxMessage.objects.filter(key=str(book), type__in=LIBRARY_TYPES)
    if changes.filter(relayed_at__isnull=True).exists():
        return False
    return not Delivery.objects.filter(
        message__in=changes, status=Delivery.Status.PENDING
    ).exists()


def live(params: Params, progress: Progress) -> Tables:
    """Change one real book and watch three real read paths catch up.

    One real rq worker process (``manage.py rqworker messaging``) runs the outbox.
    For each path the value is read once (stored), the book gains a copy through
    ``library.services.stock_correct`` (version bump and outbox message in the
    change's transaction), and the path is read every 10 ms until it serves the new
    count, then five more times. Counted from the commit on:

    - ``time (lifetime=1 s)`` — a lab entry (``cache_aside``, one-second lifetime)
      that nothing else retires: stale until Redis expires it;
    - ``event (outbox, rq worker)`` — the branch's catalogue page
      (``library.cache.reads.branch_books_page``): stale until the worker's
      ``cache_invalidation`` delivery bumps the branch's generation;
    - ``version (book_detail)`` — ``library.cache.reads.book_detail``: the change
      moved the version in the key, so the first read after the commit misses and
      is already fresh.

    ``delay_ms`` is commit to first fresh read (machine-dependent; 10 ms read
    spacing). The book (the catalogue's first) gets its shelf count back at the end.
    """
    from course.labs.live import live_step, live_system, new_run_id
    from course.labs.live_store import run_keys, shelves_restored
    from library.models import Book

    book = Book.objects.order_by("pk").values_list("pk", flat=True).first()
    if book is None:
        raise LabError("live: the database has no book (manage.py seed_library)")
    branch, page = _catalogue_page(book)
    run = new_run_id()
    rows: list[list[Cell]] = []
    with (
        live_system(run=run, progress=progress, workers=1) as system,
        run_keys(run),
        shelves_restored([book]),
    ):
        live_step(progress, 0.3, "time: an entry only its lifetime retires")
        # A backlog the worker is still draining would hold the database's write
        # lock and make the change commit late into the entry's second of life.
        _wait_quiet(book, system)
        rows.append(_live_time(run, book))
        live_step(progress, 0.6, "event: the outbox and a real rq worker")
        _wait_quiet(book, system)
        rows.append(_live_event(book, branch, page, system))
        live_step(progress, 0.85, "version: book_detail's key")
        rows.append(_live_version(book))
    return {"live_invalidation": table(LIVE_COLUMNS, rows)}


LAB = Lab(
    slug="invalidation",
    title="Invalidation",
    params=(
        Param(
            "ops", "int", 1200, "operations in the workload", minimum=0, maximum=200_000
        ),
        Param("seed", "int", 20250729, "generator seed", minimum=0, maximum=SEED_MAX),
        Param(
            "lifetimes",
            "int_list",
            [10, 50, 200],
            "entry lifetimes in ticks, one time-based row each",
            minimum=0,
            maximum=1_000_000,
            max_items=8,
        ),
        Param(
            "delays",
            "int_list",
            [5, 25],
            "ticks between consumer runs, one event-based row each",
            minimum=1,
            maximum=1_000_000,
            max_items=8,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="invalidation",
            label="invalidation",
            values=("origin_reads", "stale"),
            title="Origin reads against stale reads",
        ),
    ),
)
