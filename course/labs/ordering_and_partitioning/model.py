"""The model part of the ordering lab: the course's workload, runs and counts."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.jsnum import JsLcg, js_fixed_number
from course.labs.ordering_and_partitioning.params import OrderingParams
from messaging.policies import partition_of as messaging_partition_of

if TYPE_CHECKING:
    pass

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
    key's order. ``key`` is a book id (a non-negative integer), routed by the
    system's own choice (``messaging.policies.partition_of``), which takes a numeric
    key modulo the count. A negative id would not be numeric there (it would go by
    CRC-32), so it is refused here instead.
    """
    if key < 0:
        raise ValueError("a partition key is a non-negative integer")
    return messaging_partition_of(str(key), partitions)


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


def model(params: OrderingParams, progress: Progress) -> Tables:
    progress(0.05, "drawing the loan events")
    events = loan_events(
        params.events,
        params.seed,
        params.books,
    )
    competing_rows: list[list[Cell]] = []
    for workers in params.workers:
        progress(0.1, f"competing: {workers} worker(s)")
        run = run_competing(events, workers)
        competing_rows.append([workers, run.duration, *inversions(run.by_finish)])

    partitioned_rows: list[list[Cell]] = []
    for partitions in params.partitions:
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
    hot = hot_key_events(params.hot_events, params.hot_seed)
    hot_rows: list[list[Cell]] = []
    for partitions in params.hot_partitions:
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
