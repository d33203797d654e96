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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    int_list_param,
    int_param,
    table,
)
from course.labs.jsnum import SEED_MAX, JsLcg, js_fixed_number

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
