"""The live part of the invalidation lab: the three invalidations timed on the real
store, the real outbox and the real catalogue pages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from config.processes import WaitTimeout
from config.processes import wait_until as process_wait_until
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step, live_system, new_run_id, wait_until
from course.labs.harness.live_store import (
    LAB_NAMESPACE,
    book_key,
    book_key_checked,
    run_keys,
    shelf_key,
    shelf_read,
    shelf_write,
    shelves_restored,
)
from course.labs.invalidation.params import InvalidationParams
from library import selectors
from library.cache.metrics import cache_redis
from library.cache.reads import LIST, book_detail, branch_books_page, branch_tenant
from library.cache.store import cache_aside, generation_get
from library.models import Book
from messaging.models import Delivery, OutboxMessage
from messaging.registry import LIBRARY_TYPES, MessageType

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem
    from library.models import Book

# --- live part ----------------------------------------------------------------------

# Whole seconds (what cache_aside takes). Two, not one: the change that follows the
# store may wait for the database's write lock, and it must still commit well
# inside the entry's life for the row to show stale reads.
LIVE_LIFETIME_S = 2
LIVE_READ_EVERY_S = 0.01
LIVE_READS_AFTER_FRESH = 5  # fresh reads after the first, to show the entry is back
LIVE_WATCH_TIMEOUT_S = 15.0
INVALIDATION_SUBSCRIPTION = "cache_invalidation"
LIVE_COLUMNS = ["invalidation", "reads", "hits", "misses", "stale", "delay_ms"]

# One read of the watched value: (what the reader was served, whether it was a hit).
Read = Callable[[], tuple[int, bool]]


@dataclass(frozen=True)
class Watch:
    """One read path watched from the change's commit until it served the new value."""

    label: str
    reads: int
    hits: int
    stale: int
    delay_ms: float | None  # commit to the first fresh read


@dataclass(frozen=True)
class Measurement:
    watches: list[Watch]


def _watch(label: str, read: Read, expected: int, committed_at: float) -> Watch:
    """Read every LIVE_READ_EVERY_S from the commit on; return what was served.

    ``delay_ms`` is the time from the write's commit to the first read that saw the
    new value; the watch goes on for LIVE_READS_AFTER_FRESH more reads.
    """
    reads = hits = stale = fresh_reads = 0
    delay_ms: float | None = None

    def watched() -> bool:
        nonlocal reads, hits, stale, fresh_reads, delay_ms
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
        return fresh_reads > LIVE_READS_AFTER_FRESH

    try:
        process_wait_until(
            watched,
            f"{label} to serve the new value",
            timeout=LIVE_WATCH_TIMEOUT_S - (time.monotonic() - committed_at),
            interval=LIVE_READ_EVERY_S,
        )
    except WaitTimeout:
        raise LabError(
            f"live: {label} still served the old value after {LIVE_WATCH_TIMEOUT_S:g} s"
        ) from None
    return Watch(label, reads, hits, stale, delay_ms)


def _change(book: int) -> tuple[int, float, int]:
    """Add a copy to the book's shelf through the library's service.

    Return the new count, the monotonic time of the commit and the id of the outbox
    message the change left.
    """

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

    return bool(
        Delivery.objects.filter(
            message_id=message,
            subscription=INVALIDATION_SUBSCRIPTION,
            status=Delivery.Status.DONE,
        ).exists()
    )


def _live_time(run: str, book: int) -> Watch:
    """A lab entry with a short lifetime and nothing else retiring it."""

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

    tenant = branch_tenant(branch)
    return LIST.key(
        tenant=tenant,
        generation=generation_get(LIST.namespace, tenant),
        criteria={"page": page},
    )


def _live_event(book: int, branch: int, page: int, system: LiveSystem) -> Watch:
    """The branch's catalogue page, retired by the outbox's cache_invalidation."""

    def read() -> tuple[int, bool]:
        before = _list_key(branch, page)
        existed = bool(cache_redis().exists(before))
        found = branch_books_page(branch_id=branch, page=page)
        if found is None:
            raise LabError(f"live: branch {branch} vanished during the run")
        return _on_page(found[1].object_list, book, page), _was_hit(existed, before)

    def _was_hit(existed: bool, before: str) -> bool:
        after = _list_key(branch, page)
        if after == before:
            return existed
        # The worker's bump landed during the read, so the read used one of the two
        # keys. Only a miss stores under the new one: if that entry exists now, this
        # read made it.
        return existed and not cache_redis().exists(after)

    read()
    if not cache_redis().exists(_list_key(branch, page)):
        raise LabError(
            "live: library.cache.reads.branch_books_page no longer stores under "
            "the key this lab builds (course/labs/invalidation/live.py: _list_key)"
        )
    new, committed_at, message = _change(book)
    watch = _watch("event (outbox, rq worker)", read, new, committed_at)
    # The fresh value must have come from the worker's bump, not from a lifetime.
    wait_until(
        lambda: _invalidated(message),
        what="the cache_invalidation delivery",
        timeout=30,
        system=system,
    )
    return watch


def _on_page(rows: Iterable[Book], book: int, page: int) -> int:
    """Return the shelf count of ``book`` among the page's rows."""
    for row in rows:
        if row.pk == book:
            return row.on_shelf
    raise LabError(f"live: book #{book} is not on page {page} of its branch")


def _live_version(book: int) -> Watch:
    """The application's book detail, whose key carries the book's version."""

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

    wait_until(
        lambda: _quiet(book),
        what="the deliveries of the book's earlier changes",
        timeout=30,
        system=system,
    )


def _quiet(book: int) -> bool:
    """Return whether every library change of the book is relayed and delivered."""

    # The key alone is not enough: lab probes use small integers as keys too.
    changes = OutboxMessage.objects.filter(key=str(book), type__in=LIBRARY_TYPES)
    if changes.filter(relayed_at__isnull=True).exists():
        return False
    return not Delivery.objects.filter(
        message__in=changes, status=Delivery.Status.PENDING
    ).exists()


def measure(params: InvalidationParams, progress: Progress) -> Measurement:
    """Change one real book and watch three real read paths catch up.

    One real rq worker process (``manage.py rqworker messaging``) runs the outbox.
    For each path the value is read once (stored), the book gains a copy through
    ``library.services.stock_correct`` (version bump and outbox message in the
    change's transaction), and the path is read every 10 ms until it serves the new
    count, then five more times. Counted from the commit on:

    - ``time (lifetime=2 s)`` — a lab entry (``cache_aside``, two-second lifetime)
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
    book = Book.objects.order_by("pk").values_list("pk", flat=True).first()
    if book is None:
        raise LabError("live: the database has no book (manage.py seed_library)")
    branch, page = _catalogue_page(book)
    run = new_run_id()
    watches: list[Watch] = []
    with (
        live_system(run=run, progress=progress, workers=1) as system,
        run_keys(run),
        shelves_restored([book]),
    ):
        live_step(progress, 0.3, "time: an entry only its lifetime retires")
        # A backlog the worker is still draining would hold the database's write
        # lock and make the change commit late into the entry's second of life.
        _wait_quiet(book, system)
        watches.append(_live_time(run, book))
        live_step(progress, 0.6, "event: the outbox and a real rq worker")
        _wait_quiet(book, system)
        watches.append(_live_event(book, branch, page, system))
        live_step(progress, 0.85, "version: book_detail's key")
        watches.append(_live_version(book))
    return Measurement(watches)


def tables(params: InvalidationParams, measured: Measurement) -> Tables:
    """One row per read path: reads, hits, misses, stale reads and the delay."""
    rows: list[list[Cell]] = [
        [w.label, w.reads, w.hits, w.reads - w.hits, w.stale, w.delay_ms]
        for w in measured.watches
    ]
    return {"live_invalidation": table(LIVE_COLUMNS, rows)}


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
