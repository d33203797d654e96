"""Lab for "Ordering and Partitioning": inversions, partition count and a hot key.

Model part, four measurements on a virtual clock where an event's duration is a
whole number of units:

1. ``competing`` — ``events`` loan events over ``books`` books, drawn from the
   course's generator seeded with ``seed``, go with no partitioning to whichever of
   ``workers`` workers frees up first (the lowest-numbered one on a tie). Events are
   then lined up by finish time and every pair that finishes in the reverse of its
   production order is an inversion: counted over all pairs (``global_inversions``)
   and over pairs of the same book (``in_key_inversions``).
2. ``partitioned`` — the same events, each sent to ``partition_of(book, n)`` and
   processed there by one worker in arrival order, for every ``n`` in
   ``partitions``. ``partition_loads`` is the busy time of partition 0, 1, ….
3. ``hot_key`` — ``hot_events`` events seeded with ``hot_seed`` where book 3 takes
   about 60 % of the traffic (six books, as printed), for every count in
   ``hot_partitions``. The busiest partition can never drop below book 3's load.
4. ``head_of_line`` — at two partitions, the events of other books that share book
   3's partition: their average wait before starting, and the average wait the same
   events would see in order in a partition of their own (no hot key ahead of them).
   With no such event both averages are ``null`` (the course prints ``-``/``NaN``).

The partition function is ``partition_of(key, partitions) = key % partitions``: the
book id modulo the partition count, a pure function of two non-negative integers with
no hashing and no state, so a live part and the application's partitioned
subscription can route with the very same rule and land every book on the partition
the model predicts.

Finish order breaks ties on the partition (or worker) number, then production order;
within one partition finish times strictly increase, so the order is total. Inversions
are counted with a merge sort (O(n log n)), not by comparing every pair, so large
``events`` values stay fast; the result is the same count. The course's header lines
(distinct books, the hot workload's totals) go to the extra tables ``workload`` and
``hot_workload``.

Live part, on real ``manage.py rqworker messaging`` processes (``course.labs.live``),
for each count in ``workers`` (at most 4, up to 400 events, 60 books):

- ``live_competing`` — no subscription of the application takes library messages
  unpartitioned for a lab alone, so competing consumption is measured with rq jobs
  of the run's own: one job per event on a private queue, enqueued in production
  order, W worker processes. A job sleeps its event's duration times 80 ms plus a
  random 0-80 ms (seeded with ``seed``), then RPUSHes its order to a Redis list:
  the list is the apply order. Columns: workers, workers_used (distinct rq workers
  that ran jobs), events, duration_s (first enqueue to the last job's end),
  global_inversions, in_key_inversions, model_in_key_inversions (the model's count
  for the same W, for comparison).
- ``live_partitioned`` — with the largest W, every event becomes a real
  ``library.services.stock_correct`` of a book the run created (one commit, one
  outbox message), which the relay copies to the partitioned ``book_ledger``
  subscription. The ledger's rows, by id, are the apply order. The books are picked
  so that ``book id mod 4`` equals ``model book mod 4``: the real router sends
  each event to the partition the model sends it to. Columns: partitions, workers,
  drain_jobs (distinct lease owners, one per drain job), events, duration_s (first
  commit to the last ledger delivery's ``done_at``), global_inversions,
  in_key_inversions, ledger_out_of_order (rows the handler itself flagged
  ``in_order=False``), partition_events (ledger deliveries per partition, from
  their ``partition`` column), model_partition_events, peak_pending (the most
  pending deliveries ``partition_loads`` showed per partition while polling),
  partition_finish_ms (first commit to each partition's last ``done_at``).
- ``live_hot_key`` — the hot-key events (book 3 hot) the same way, on the ledger's
  4 partitions. Columns: partitions, workers, events, hot_book (the model book with
  the most ledger rows), hot_book_id (its live id), hot_share_pct, hot_partition,
  busiest_partition, partition_events, model_partition_events, peak_pending,
  partition_finish_ms, in_key_inversions, ledger_out_of_order.

The ledger's handler has no deliberate delay (``library`` offers no hook for one),
so partition_finish_ms reflects real, short processing; the in-key count is zero by
construction (one lease per partition, offset order), whatever the delays. The run's
books, branch, ledger rows and (once the stream consumers passed them) projection
rows are deleted at the end; its outbox messages stay in the log like any other.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from django.utils import timezone

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
from messaging.registry import SUBSCRIPTIONS

if TYPE_CHECKING:
    from course.labs.live import LiveSystem

log = logging.getLogger("course.live")

EVENT_TYPES = ("issued", "return_received", "reserved")
LONGEST_DURATION = 3  # durations are 1, 2 or 3 units
HOT_BOOK = 3
HOT_SHARE = 0.6  # a draw below this picks the hot book outright
HOT_BOOKS = 6  # the hot-key workload keeps the course's six books
HEAD_OF_LINE_PARTITIONS = 2


def partition_of(key: int, partitions: int) -> int:
    """Return the partition a key's messages go to: ``key mod partitions``.

    Every message of one key lands on the same partition, which is what keeps that
    key's order. ``key`` is a book id (a non-negative integer).
    """
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    if key < 0:
        raise ValueError("a partition key is a non-negative integer")
    return key % partitions


@dataclass(frozen=True)
class Event:
    order: int  # position in production order, from 0
    book_id: int
    duration: int
    type: str = ""


@dataclass(frozen=True)
class Finished:
    """An event with the slot (worker or partition) that ran it and its finish time."""

    event: Event
    slot: int
    finish: int

    @property
    def wait(self) -> int:
        return self.finish - self.event.duration


@dataclass(frozen=True)
class Run:
    by_finish: list[Finished]
    duration: int
    loads: list[int]


def loan_events(count: int, seed: int, books: int) -> list[Event]:
    """Return the lesson's event list: three draws (book, type, duration) per event."""
    rng = JsLcg(seed)
    result: list[Event] = []
    for order in range(count):
        book_id = 1 + rng.below(books)
        kind = EVENT_TYPES[rng.below(len(EVENT_TYPES))]
        duration = 1 + rng.below(LONGEST_DURATION)
        result.append(Event(order, book_id, duration, kind))
    return result


def hot_key_events(count: int, seed: int) -> list[Event]:
    """Return the hot-key workload; an event takes two draws, or three if not hot."""
    rng = JsLcg(seed)
    result: list[Event] = []
    for order in range(count):
        hot = rng.random() < HOT_SHARE
        # the second draw happens only for a cold pick, and may still land on book 3
        book_id = HOT_BOOK if hot else 1 + rng.below(HOT_BOOKS)
        duration = 1 + rng.below(LONGEST_DURATION)
        result.append(Event(order, book_id, duration))
    return result


def _finish_order(done: Iterable[Finished]) -> list[Finished]:
    return sorted(done, key=lambda f: (f.finish, f.slot, f.event.order))


def run_partitioned(events: Sequence[Event], partitions: int) -> Run:
    """Run each partition as one worker taking its events in arrival order."""
    busy_until = [0] * partitions
    done: list[Finished] = []
    for event in events:
        slot = partition_of(event.book_id, partitions)
        busy_until[slot] += event.duration
        done.append(Finished(event, slot, busy_until[slot]))
    return Run(_finish_order(done), max(busy_until), busy_until)


def run_competing(events: Sequence[Event], workers: int) -> Run:
    """Hand each event to the worker that is free earliest (lowest number on a tie)."""
    busy_until = [0] * workers
    done: list[Finished] = []
    for event in events:
        # min() keeps the first of equal values: the lowest-numbered free worker
        slot = min(range(workers), key=busy_until.__getitem__)
        busy_until[slot] += event.duration
        done.append(Finished(event, slot, busy_until[slot]))
    return Run(_finish_order(done), max(busy_until), busy_until)


def count_inversions(values: Sequence[int]) -> int:
    """Return how many pairs i < j have values[i] > values[j] (merge sort)."""
    items = list(values)
    inversions = 0
    width = 1
    while width < len(items):
        merged: list[int] = []
        for start in range(0, len(items), 2 * width):
            left = items[start : start + width]
            right = items[start + width : start + 2 * width]
            i = j = 0
            while i < len(left) and j < len(right):
                if right[j] < left[i]:
                    # right[j] jumps every left item still waiting: each is a pair
                    inversions += len(left) - i
                    merged.append(right[j])
                    j += 1
                else:
                    merged.append(left[i])
                    i += 1
            merged.extend(left[i:])
            merged.extend(right[j:])
        items = merged
        width *= 2
    return inversions


def inversions(by_finish: Sequence[Finished]) -> tuple[int, int]:
    """Return (global, in-key) inversions of production order in finish order."""
    per_book: dict[int, list[int]] = {}
    for done in by_finish:
        per_book.setdefault(done.event.book_id, []).append(done.event.order)
    in_key = sum(count_inversions(orders) for orders in per_book.values())
    return count_inversions([d.event.order for d in by_finish]), in_key


def loads_text(loads: Sequence[int]) -> str:
    return " ".join(str(load) for load in loads)


def mean_fixed(waits: Sequence[int]) -> float | None:
    """Return ``Number(mean.toFixed(1))``; None when there is nothing to average."""
    if not waits:
        return None
    return js_fixed_number(sum(waits) / len(waits), 1)


def head_of_line(events: Sequence[Event]) -> tuple[int, float | None, float | None]:
    """Return (blocked events, their average wait, their average wait alone).

    Blocked events are those sharing the hot book's partition at two partitions
    without being the hot book. Alone, they would run back to back in production
    order, each waiting for the ones before it only.
    """
    hot_slot = partition_of(HOT_BOOK, HEAD_OF_LINE_PARTITIONS)
    run = run_partitioned(events, HEAD_OF_LINE_PARTITIONS)
    blocked = [
        done
        for done in run.by_finish
        if done.slot == hot_slot and done.event.book_id != HOT_BOOK
    ]
    alone: list[int] = []
    clock = 0
    for done in sorted(blocked, key=lambda d: d.event.order):
        alone.append(clock)
        clock += done.event.duration
    return (
        len(blocked),
        mean_fixed([done.wait for done in blocked]),
        mean_fixed(alone),
    )


def model(params: Params, progress: Progress) -> Tables:
    progress(0.05, "drawing the loan events")
    events = loan_events(
        int_param(params, "events"),
        int_param(params, "seed"),
        int_param(params, "books"),
    )
    competing_rows: list[list[Cell]] = []
    for workers in int_list_param(params, "workers"):
        progress(0.1, f"competing: {workers} worker(s)")
        run = run_competing(events, workers)
        competing_rows.append([workers, run.duration, *inversions(run.by_finish)])

    partitioned_rows: list[list[Cell]] = []
    for partitions in int_list_param(params, "partitions"):
        progress(0.4, f"partitioned: {partitions} partition(s)")
        run = run_partitioned(events, partitions)
        partitioned_rows.append(
            [
                partitions,
                run.duration,
                *inversions(run.by_finish),
                loads_text(run.loads),
            ]
        )

    progress(0.7, "hot key: one book takes most of the traffic")
    hot = hot_key_events(int_param(params, "hot_events"), int_param(params, "hot_seed"))
    hot_rows: list[list[Cell]] = []
    for partitions in int_list_param(params, "hot_partitions"):
        run = run_partitioned(hot, partitions)
        hot_rows.append([partitions, run.duration, loads_text(run.loads)])
    hot_only = [e for e in hot if e.book_id == HOT_BOOK]

    progress(0.9, "head-of-line blocking behind the hot key")
    blocked, waited, alone = head_of_line(hot)
    return {
        "competing": table(
            ["workers", "duration", "global_inversions", "in_key_inversions"],
            competing_rows,
        ),
        "partitioned": table(
            [
                "partitions",
                "duration",
                "global_inversions",
                "in_key_inversions",
                "partition_loads",
            ],
            partitioned_rows,
        ),
        "hot_key": table(["partitions", "duration", "partition_loads"], hot_rows),
        "head_of_line": table(
            ["blocked_events", "average_wait", "alone_average_wait"],
            [[blocked, waited, alone]],
        ),
        "workload": table(
            ["events", "distinct_books"],
            [[len(events), len({e.book_id for e in events})]],
        ),
        "hot_workload": table(
            ["events", "total_duration", "hot_book", "hot_events", "hot_load"],
            [
                [
                    len(hot),
                    sum(e.duration for e in hot),
                    HOT_BOOK,
                    len(hot_only),
                    sum(e.duration for e in hot_only),
                ]
            ],
        ),
    }


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
    import django_rq

    time.sleep(delay_ms / 1000)
    redis = django_rq.get_connection("messaging")
    redis.rpush(key, order)
    redis.expire(key, APPLIED_TTL_S)


def applied_key(run: str, workers: int) -> str:
    """Return the Redis list of one competing run (named for the harness's cleanup)."""
    from course.labs.live import PRIVATE_QUEUE_PREFIX

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


def expected_partition_events(events: Sequence[Event], partitions: int) -> list[int]:
    """Return how many events the model routes to each partition."""
    counts = [0] * partitions
    for event in events:
        counts[partition_of(event.book_id, partitions)] += 1
    return counts


@dataclass
class _LabBooks:
    """The live run's own branch and books; model book k is live book ``ids[k]``."""

    branch_id: int
    ids: dict[int, int]
    created: list[int] = field(default_factory=list)
    message_ids: list[int] = field(default_factory=list)


def _books_create(run: str, books: int, partitions: int) -> _LabBooks:
    """Create a branch and one live book per model book, on the model's partition.

    Book ids come from the database, so books are created until, for every model
    book ``k``, one has ``id mod partitions == k mod partitions``: the real router
    (book id modulo the partition count) then puts every live book on the partition
    the model puts its model book on. The extra books are deleted with the others.
    """
    from library.models import Book, Branch

    branch = Branch.objects.create(name=f"Lab ordering {run}", city="Lab")
    lab = _LabBooks(branch_id=branch.pk, ids={})
    while len(lab.ids) < books:
        book = Book.objects.create(
            title=f"Lab ordering {run} #{len(lab.created) + 1}",
            author="Lab",
            branch=branch,
        )
        lab.created.append(book.pk)
        for k in range(1, books + 1):
            if k not in lab.ids and book.pk % partitions == k % partitions:
                lab.ids[k] = book.pk
                break
    return lab


def _lab_messages_settled(lab: _LabBooks) -> bool:
    from messaging.models import Delivery

    return not Delivery.objects.filter(
        message_id__in=lab.message_ids, status=Delivery.Status.PENDING
    ).exists()


def _stream_passed(last: int) -> bool:
    from messaging.models import StreamConsumer
    from messaging.registry import STREAM_CONSUMERS

    offsets = dict(StreamConsumer.objects.values_list("name", "offset"))
    return all(offsets.get(name, 0) >= last for name in STREAM_CONSUMERS)


def _books_delete(lab: _LabBooks) -> None:
    """Delete the run's ledger rows, books and branch, if no delivery still needs them.

    A pending delivery of a lab message (the run failed half-way) would fail on a
    missing book or branch, retry and end among the dead letters: the books are then
    left in place and the log says so. Projection rows go only once every stream
    consumer has read past the run's last message (or it would write them again).
    """
    from library.models import Book, BookLedger, Branch, StockProjection

    if lab.message_ids and not _lab_messages_settled(lab):
        log.warning("live ordering lab: deliveries pending, books %s kept", lab.created)
        return
    BookLedger.objects.filter(book_id__in=lab.created).delete()
    if not lab.message_ids or _stream_passed(max(lab.message_ids)):
        StockProjection.objects.filter(book_id__in=lab.created).delete()
    Book.objects.filter(pk__in=lab.created).delete()
    Branch.objects.filter(pk=lab.branch_id).delete()


def _aware(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def _live_competing(
    system: LiveSystem, events: Sequence[Event], delays: Sequence[int], workers: int
) -> list[Cell]:
    """One rq job per event on the run's private queue, taken by ``workers`` workers.

    1. Enqueue the jobs in production order (rq's queue is FIFO).
    2. Wait until every job finished; a failed one is a LabError.
    3. Read the finish order from the run's Redis list and count inversions.
    """
    from rq.job import Job, JobStatus

    from course.labs import live as harness

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
    ended = max(_aware(job.ended_at) for job in jobs if job.ended_at is not None)
    model_run = run_competing(events, workers)
    return [
        workers,
        len({job.worker_name for job in jobs}),
        len(events),
        round((ended - started).total_seconds(), 2),
        *live_inversions(applied, events),
        inversions(model_run.by_finish)[1],
    ]


@dataclass(frozen=True)
class _Ordered:
    """What one partitioned run measured on the real ``book_ledger`` subscription."""

    events: int
    drain_jobs: int
    duration_s: float
    global_inversions: int
    in_key_inversions: int
    out_of_order: int
    partition_events: list[int]
    peak_pending: list[int]
    partition_finish_ms: list[int]
    ledger_counts: dict[int, int]  # model book -> ledger rows


def _live_partitioned(
    system: LiveSystem, events: Sequence[Event], lab: _LabBooks
) -> _Ordered:
    """Publish each event as a real stock correction; read the ledger's apply order.

    1. For each event in production order, ``stock_correct`` its live book: one
       commit, one outbox message (the offset is the production order), copied by
       the relay to ``book_ledger`` on partition ``book id mod 4``.
    2. Wait until every ledger delivery is done, sampling ``partition_loads``.
    3. The ledger rows, by id, are the apply order; their ``in_order`` flag is the
       handler's own check; the delivery rows say which partition took each event.
    """
    from django.db.models import Max

    from course.labs import live as harness
    from library.models import BookLedger
    from library.services import stock_correct
    from messaging.models import Delivery, OutboxMessage
    from messaging.partitions import partition_loads

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
    return _Ordered(
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


def live(params: Params, progress: Progress) -> Tables:
    """Competing rq workers vs the partitioned ``book_ledger``, on real processes.

    1. Check the live limits before starting anything.
    2. Create the run's branch and books (each on its model book's partition).
    3. For each worker count W (ascending): start W workers, run the competing jobs;
       with the largest W, also publish the main and the hot-key events as real
       stock corrections and measure the ledger; wait until every subscription has
       processed the run's messages.
    4. However it ends: stop the workers, delete the run's books (see
       ``_books_delete``).
    """
    from course.labs import live as harness

    count = int_param(params, "events")
    books = int_param(params, "books")
    hot_count = int_param(params, "hot_events")
    counts = sorted(set(int_list_param(params, "workers")))
    if max(count, hot_count) > LIVE_MAX_EVENTS:
        raise LabError(f"live: at most {LIVE_MAX_EVENTS} events per workload")
    if books > LIVE_MAX_BOOKS:
        raise LabError(f"live: at most {LIVE_MAX_BOOKS} books")
    if counts[-1] > LIVE_MAX_WORKERS:
        raise LabError(f"live: at most {LIVE_MAX_WORKERS} workers")
    events = loan_events(count, int_param(params, "seed"), books)
    hot = hot_key_events(hot_count, int_param(params, "hot_seed"))
    rng = random.Random(int_param(params, "seed"))
    delays = [
        event.duration * LIVE_UNIT_MS + rng.randint(0, LIVE_JITTER_MS)
        for event in events
    ]
    partitions = SUBSCRIPTIONS[LEDGER].partitions
    run = harness.new_run_id()
    harness.live_step(progress, 0.01, "creating the run's branch and books")
    lab = _books_create(run, max(books, HOT_BOOKS), partitions)
    competing_rows: list[list[Cell]] = []
    main: _Ordered | None = None
    hot_run: _Ordered | None = None
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
                competing_rows.append(_live_competing(system, events, delays, workers))
                if workers != counts[-1]:
                    continue
                harness.live_step(progress, 0.7, "partitioned: book_ledger")
                main = _live_partitioned(system, events, lab)
                harness.live_step(progress, 0.8, "hot key: book_ledger")
                hot_run = _live_partitioned(system, hot, lab)
                harness.live_step(progress, 0.9, "waiting for every subscription")
                harness.wait_until(
                    lambda: _lab_messages_settled(lab),
                    what="the other subscriptions' copies of the run's messages",
                    timeout=60,
                    system=system,
                )
                with contextlib.suppress(LabError):
                    # Only to tidy the projection up; a slow stream keeps its rows.
                    harness.wait_until(
                        partial(_stream_passed, max(lab.message_ids, default=0)),
                        what="the streams",
                        timeout=15,
                    )
    finally:
        _books_delete(lab)
    if main is None or hot_run is None:  # the largest worker count runs both
        raise LabError("live: the partitioned runs did not run")
    return _live_tables(
        competing_rows, main, hot_run, events, hot, lab, counts[-1], partitions
    )


def _live_tables(
    competing_rows: list[list[Cell]],
    main: _Ordered,
    hot_run: _Ordered,
    events: Sequence[Event],
    hot: Sequence[Event],
    lab: _LabBooks,
    workers: int,
    partitions: int,
) -> Tables:
    hottest = max(sorted(hot_run.ledger_counts), key=hot_run.ledger_counts.__getitem__)
    busiest = max(range(partitions), key=hot_run.partition_events.__getitem__)
    share = hot_run.ledger_counts[hottest] / hot_run.events if hot_run.events else 0
    return {
        "live_competing": table(
            [
                "workers",
                "workers_used",
                "events",
                "duration_s",
                "global_inversions",
                "in_key_inversions",
                "model_in_key_inversions",
            ],
            competing_rows,
        ),
        "live_partitioned": table(
            [
                "partitions",
                "workers",
                "drain_jobs",
                "events",
                "duration_s",
                "global_inversions",
                "in_key_inversions",
                "ledger_out_of_order",
                "partition_events",
                "model_partition_events",
                "peak_pending",
                "partition_finish_ms",
            ],
            [
                [
                    partitions,
                    workers,
                    main.drain_jobs,
                    main.events,
                    main.duration_s,
                    main.global_inversions,
                    main.in_key_inversions,
                    main.out_of_order,
                    loads_text(main.partition_events),
                    loads_text(expected_partition_events(events, partitions)),
                    loads_text(main.peak_pending),
                    loads_text(main.partition_finish_ms),
                ]
            ],
        ),
        "live_hot_key": table(
            [
                "partitions",
                "workers",
                "events",
                "hot_book",
                "hot_book_id",
                "hot_share_pct",
                "hot_partition",
                "busiest_partition",
                "partition_events",
                "model_partition_events",
                "peak_pending",
                "partition_finish_ms",
                "in_key_inversions",
                "ledger_out_of_order",
            ],
            [
                [
                    partitions,
                    workers,
                    hot_run.events,
                    hottest,
                    lab.ids[hottest],
                    js_fixed_number(100 * share, 1),
                    partition_of(lab.ids[hottest], partitions),
                    busiest,
                    loads_text(hot_run.partition_events),
                    loads_text(expected_partition_events(hot, partitions)),
                    loads_text(hot_run.peak_pending),
                    loads_text(hot_run.partition_finish_ms),
                    hot_run.in_key_inversions,
                    hot_run.out_of_order,
                ]
            ],
        ),
    }


def _counts(name: str, default: list[int], what: str) -> Param:
    return Param(name, "int_list", default, what, minimum=1, maximum=100, max_items=12)


LAB = Lab(
    slug="ordering-and-partitioning",
    title="Ordering and Partitioning",
    params=(
        Param(
            "events",
            "int",
            24,
            "loan events in the main workload",
            minimum=0,
            maximum=20_000,
        ),
        Param(
            "seed",
            "int",
            20250720,
            "seed of the course's generator for the main workload",
            minimum=0,
            maximum=SEED_MAX,
        ),
        Param(
            "books",
            "int",
            6,
            "distinct books the main workload draws from",
            minimum=1,
            maximum=10_000,
        ),
        _counts("workers", [1, 2, 3, 4], "worker counts with no partitioning"),
        _counts("partitions", [1, 2, 3, 4, 6], "partition counts (key: book id)"),
        Param(
            "hot_events",
            "int",
            30,
            "events in the hot-key workload (book 3 is hot)",
            minimum=0,
            maximum=20_000,
        ),
        Param(
            "hot_seed",
            "int",
            7,
            "seed of the course's generator for the hot-key workload",
            minimum=0,
            maximum=SEED_MAX,
        ),
        _counts("hot_partitions", [1, 2, 4, 8], "partition counts for the hot key"),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="competing",
            label="workers",
            values=("global_inversions", "in_key_inversions"),
            title="Inversions with competing workers",
            unit="pairs",
        ),
        Chart(
            table="partitioned",
            label="partitions",
            values=("global_inversions", "in_key_inversions"),
            title="Inversions when partitioned by book",
            unit="pairs",
        ),
        Chart(
            table="partitioned",
            label="partitions",
            values=("duration",),
            title="Duration by partition count",
            unit="units",
        ),
        Chart(
            table="hot_key",
            label="partitions",
            values=("duration",),
            title="Duration with a hot key",
            unit="units",
        ),
    ),
)
