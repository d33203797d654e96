"""The live part of the ordering lab: real workers, the real partitioned ledger."""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import django_rq
from django.db.models import Max
from django.utils import timezone
from rq.job import Job, JobStatus

from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    table,
)
from course.labs.harness.live import PRIVATE_QUEUE_PREFIX
from course.labs.ordering_and_partitioning.books import (
    LabBooks,
    as_aware,
    books_create,
    books_delete,
    lab_messages_pending,
    lab_messages_settled,
    stream_passed,
)
from course.labs.ordering_and_partitioning.head_of_line import (
    Blocking,
    live_head_of_line,
)
from course.labs.ordering_and_partitioning.live_tables import (
    Ordered,
    build_live_tables,
)
from course.labs.ordering_and_partitioning.model import (
    HOT_BOOKS,
    Event,
    count_inversions,
    hot_key_events,
    inversions,
    loan_events,
    run_competing,
)
from course.labs.ordering_and_partitioning.params import OrderingParams
from library.models import BookLedger
from library.services import stock_correct
from messaging.models import Delivery, OutboxMessage
from messaging.registry import SUBSCRIPTIONS
from messaging.services.partitions import partition_loads

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem

log = logging.getLogger("course.live")


# --- live part ---------------------------------------------------------------------

# What one live run may ask for: every event is a real commit or a real rq job, and
# every worker a real process on a shared machine.
LIVE_MAX_EVENTS = 400
LIVE_MAX_BOOKS = 60
LIVE_MAX_WORKERS = 4
# A competing job sleeps its event's duration in these units, plus a random jitter.
LIVE_UNIT_MS = 80
LIVE_JITTER_MS = 80
LEDGER = "book_ledger"
APPLIED_TTL_S = 3600


def competing_apply(key: str, order: int, delay_ms: int) -> None:
    """rq job of the competing run: work ``delay_ms``, then record the event applied.

    The record is an RPUSH of the event's production order onto ``key``: Redis
    serializes the pushes, so the list is the order in which the jobs finished.
    """

    time.sleep(delay_ms / 1000)
    redis = django_rq.get_connection("messaging")
    redis.rpush(key, order)
    redis.expire(key, APPLIED_TTL_S)


def applied_key(run: str, workers: int) -> str:
    """Return the Redis list of one competing run (named for the harness's cleanup)."""

    return f"{PRIVATE_QUEUE_PREFIX}{run}:applied:{workers}"


def live_inversions(applied: Sequence[int], events: Sequence[Event]) -> tuple[int, int]:
    """Return (global, in-key) inversions of production order in ``applied`` order.

    ``applied`` lists event orders as the system applied them.
    """
    book = {event.order: event.book_id for event in events}
    per_book: dict[int, list[int]] = {}
    for order in applied:
        per_book.setdefault(book[order], []).append(order)
    in_key = sum(count_inversions(orders) for orders in per_book.values())
    return count_inversions(applied), in_key


@dataclass(frozen=True)
class Competing:
    """One competing run: the order its jobs finished in, on real workers."""

    workers: int
    workers_used: int
    events: int
    duration_s: float
    global_inversions: int
    in_key_inversions: int


@dataclass(frozen=True)
class Measurement:
    competing: list[Competing]
    main: Ordered
    hot: Ordered
    blocking: Blocking
    book_ids: dict[int, int]  # model book -> the run's real book
    partitions: int


def _live_competing(
    system: LiveSystem, events: Sequence[Event], delays: Sequence[int], workers: int
) -> Competing:
    """One rq job per event on the run's private queue, taken by ``workers`` workers.

    1. Enqueue the jobs in production order (rq's queue is FIFO).
    2. Wait until every job finished; a failed one is a LabError.
    3. Read the finish order from the run's Redis list and count inversions.
    """

    key = applied_key(system.run, workers)
    started = timezone.now()
    job_ids = [
        system.enqueue(
            competing_apply, key, event.order, delay, job_id=f"w{workers}-{event.order}"
        ).id
        for event, delay in zip(events, delays, strict=True)
    ]
    harness.wait_until(
        lambda: harness.rq_jobs_settled(system, job_ids),
        what=f"the competing run with {workers} worker(s)",
        timeout=30 + 2 * sum(delays) / 1000,
        system=system,
    )
    jobs = [
        job
        for job in Job.fetch_many(job_ids, connection=harness.redis_connection())
        if job is not None
    ]
    failed = [job.id for job in jobs if job.get_status() != JobStatus.FINISHED]
    if failed or len(jobs) != len(events):
        raise LabError(f"live: competing jobs failed or vanished: {failed[:3]}")
    raw = harness.redis_connection().lrange(key, 0, -1)
    applied = [int(value) for value in raw]
    if sorted(applied) != [event.order for event in events]:
        raise LabError(f"live: {len(applied)} of {len(events)} events recorded")
    ended = max(as_aware(job.ended_at) for job in jobs if job.ended_at is not None)
    return Competing(
        workers,
        len({job.worker_name for job in jobs}),
        len(events),
        round((ended - started).total_seconds(), 2),
        *live_inversions(applied, events),
    )


def _live_partitioned(
    system: LiveSystem, events: Sequence[Event], lab: LabBooks
) -> Ordered:
    """Publish each event as a real stock correction; read the ledger's apply order.

    1. For each event in production order, ``stock_correct`` its live book: one
       commit, one outbox message (the offset is the production order), copied by
       the relay to ``book_ledger`` on partition ``book id mod 4``.
    2. Wait until every ledger delivery is done, sampling ``partition_loads``.
    3. The ledger rows, by id, are the apply order; their ``in_order`` flag is the
       handler's own check; the delivery rows say which partition took each event.
    """

    partitions = SUBSCRIPTIONS[LEDGER].partitions
    order_of: dict[int, int] = {}  # message id -> event order
    model_book: dict[int, int] = {pk: k for k, pk in lab.ids.items()}
    started = timezone.now()
    for event in events:
        book_id = lab.ids[event.book_id]
        stock_correct(book_id=book_id, on_shelf=event.order)
        # Only this run writes to its books: the newest message of one is ours.
        message_id = (
            OutboxMessage.objects.filter(key=str(book_id))
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        )
        if message_id is None or message_id in order_of:
            raise LabError(f"live: no outbox message for event {event.order}")
        order_of[message_id] = event.order
        lab.message_ids.append(message_id)
    ids = list(order_of)
    peak = [0] * partitions

    def ledger_done() -> bool:
        for p, pending in enumerate(partition_loads(LEDGER)):
            peak[p] = max(peak[p], pending)
        deliveries = Delivery.objects.filter(subscription=LEDGER, message_id__in=ids)
        if deliveries.filter(status=Delivery.Status.DEAD).exists():
            raise LabError("live: a book_ledger delivery went to the dead letters")
        done = deliveries.filter(status=Delivery.Status.DONE).count()
        return done == len(ids)

    harness.wait_until(
        ledger_done,
        what=f"the book_ledger deliveries of {len(ids)} events",
        timeout=60 + 0.2 * len(ids),
        system=system,
    )
    ledger = list(
        BookLedger.objects.filter(message_id__in=ids)
        .order_by("id")
        .values_list("message_id", "book_id", "in_order")
    )
    applied = [order_of[message_id] for message_id, _, _ in ledger]
    global_inv, in_key = live_inversions(applied, events)
    rows = list(
        Delivery.objects.filter(subscription=LEDGER, message_id__in=ids).values_list(
            "partition", "done_at", "lease_owner"
        )
    )
    counts = [0] * partitions
    finish = [0] * partitions
    for partition, done_at, _ in rows:
        if partition is None or done_at is None:
            raise LabError("live: a book_ledger delivery has no partition or end")
        counts[partition] += 1
        ms = round((done_at - started).total_seconds() * 1000)
        finish[partition] = max(finish[partition], ms)
    last = Delivery.objects.filter(subscription=LEDGER, message_id__in=ids).aggregate(
        last=Max("done_at")
    )["last"]
    per_book: dict[int, int] = {}
    for _, book_id, _ in ledger:
        per_book[model_book[book_id]] = per_book.get(model_book[book_id], 0) + 1
    return Ordered(
        events=len(ids),
        # A lease owner ("host:pid:nonce") is unique per drain job.
        drain_jobs=len({owner for *_, owner in rows}),
        duration_s=round((last - started).total_seconds(), 2),
        global_inversions=global_inv,
        in_key_inversions=in_key,
        out_of_order=sum(1 for *_, in_order in ledger if not in_order),
        partition_events=counts,
        peak_pending=peak,
        partition_finish_ms=finish,
        ledger_counts=per_book,
    )


def live_check(params: OrderingParams) -> str | None:
    """Refuse what real processes cannot run: no worker count, or too much work."""
    if not params.workers:
        return (
            "workers: the live part needs at least one worker count (it runs the "
            "partitioned measurements with the largest)"
        )
    if max(params.events, params.hot_events) > LIVE_MAX_EVENTS:
        return f"live: at most {LIVE_MAX_EVENTS} events per workload"
    if params.books > LIVE_MAX_BOOKS:
        return f"live: at most {LIVE_MAX_BOOKS} books"
    if max(params.workers) > LIVE_MAX_WORKERS:
        return f"live: at most {LIVE_MAX_WORKERS} workers"
    return None


def measure(params: OrderingParams, progress: Progress) -> Measurement:
    """Competing rq workers vs the partitioned ``book_ledger``, on real processes.

    1. Create the run's branch and books (each on its model book's partition).
    2. For each worker count W (ascending): start W workers, run the competing jobs;
       with the largest W, also publish the main and the hot-key events as real
       stock corrections and measure the ledger; wait until every subscription has
       processed the run's messages.
    3. However it ends: stop the workers, delete the run's books (see
       ``books_delete``).
    """
    books = params.books
    counts = sorted(set(params.workers))
    events = loan_events(params.events, params.seed, books)
    hot = hot_key_events(params.hot_events, params.hot_seed)
    rng = random.Random(params.seed)
    delays = [
        event.duration * LIVE_UNIT_MS + rng.randint(0, LIVE_JITTER_MS)
        for event in events
    ]
    partitions = SUBSCRIPTIONS[LEDGER].partitions
    run = harness.new_run_id()
    harness.live_step(progress, 0.01, "creating the run's branch and books")
    lab = books_create(run, max(books, HOT_BOOKS), partitions)
    competing: list[Competing] = []
    main: Ordered | None = None
    hot_run: Ordered | None = None
    blocking: Blocking | None = None
    try:
        for index, workers in enumerate(counts):
            # A run id per worker set: rq refuses a worker named like one whose
            # death it has not recorded (a SIGKILLed predecessor's name).
            with harness.live_system(
                run=f"{run}w{workers}",
                progress=progress,
                workers=workers,
                private_queue=True,
            ) as system:
                share = 0.6 * index / len(counts)
                harness.live_step(
                    progress, 0.05 + share, f"competing: {workers} worker(s)"
                )
                competing.append(_live_competing(system, events, delays, workers))
                if workers != counts[-1]:
                    continue
                harness.live_step(progress, 0.7, "partitioned: book_ledger")
                main = _live_partitioned(system, events, lab)
                harness.live_step(progress, 0.8, "hot key: book_ledger")
                hot_run = _live_partitioned(system, hot, lab)
                harness.live_step(progress, 0.85, "head-of-line: a bad change first")
                blocking = live_head_of_line(system, lab, partitions)
                harness.live_step(progress, 0.9, "waiting for every subscription")
                harness.wait_until(
                    lambda: lab_messages_settled(lab),
                    what="the other subscriptions' copies of the run's messages",
                    timeout=60,
                    system=system,
                    detail=lambda: lab_messages_pending(lab),
                )
                with contextlib.suppress(LabError):
                    # Only to tidy the projection up; a slow stream keeps its rows.
                    harness.wait_until(
                        partial(stream_passed, max(lab.message_ids, default=0)),
                        what="the streams",
                        timeout=15,
                    )
    finally:
        books_delete(lab)
    if main is None or hot_run is None or blocking is None:
        raise LabError("live: the partitioned runs did not run")  # the largest runs
    return Measurement(competing, main, hot_run, blocking, dict(lab.ids), partitions)


def tables(params: OrderingParams, measured: Measurement) -> Tables:
    """The measured orders beside the model's, run on the same events."""
    events = loan_events(params.events, params.seed, params.books)
    hot = hot_key_events(params.hot_events, params.hot_seed)
    competing_rows: list[list[Cell]] = [
        [
            run.workers,
            run.workers_used,
            run.events,
            run.duration_s,
            run.global_inversions,
            run.in_key_inversions,
            inversions(run_competing(events, run.workers).by_finish)[1],
        ]
        for run in measured.competing
    ]
    workers = max(run.workers for run in measured.competing)
    built = build_live_tables(
        competing_rows,
        measured.main,
        measured.hot,
        events,
        hot,
        measured.book_ids,
        workers,
        measured.partitions,
    )
    blocking = measured.blocking
    built["live_head_of_line"] = table(
        [
            "blocked_events",
            "average_wait_ms",
            "alone_average_wait_ms",
            "head_attempts",
            "head_outcome",
        ],
        [
            [
                blocking.blocked_events,
                blocking.average_wait_ms,
                blocking.alone_average_wait_ms,
                blocking.head_attempts,
                blocking.head_outcome,
            ]
        ],
    )
    return built


LIVE = LivePart(check=live_check, measure=measure, tables=tables)
