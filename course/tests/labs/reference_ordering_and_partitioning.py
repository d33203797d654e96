"""An independent re-implementation of the ordering-and-partitioning lab.

Nothing here imports ``course/labs``. Where the lab keeps one busy-until clock per
slot and counts inversions with a merge sort, this version takes the definitions
literally: competing workers are a heap of (free at, worker), a partition's finish
times are the running sums of its own durations, inversions are counted by looking
at every pair, and head-of-line waits are prefix sums. The generator is
``reference.Generator`` (exact integers plus one rounding), averages print through
``reference.to_fixed_1`` (Fractions of the double).
"""

from __future__ import annotations

import heapq
from itertools import accumulate, combinations
from typing import NamedTuple

from course.tests.labs.reference import Generator, to_fixed_1

Row = list[object]


class Ev(NamedTuple):
    order: int
    book: int
    duration: int


class Done(NamedTuple):
    finish: int
    slot: int
    order: int
    book: int
    duration: int


def main_events(count: int, seed: int, books: int) -> list[Ev]:
    gen = Generator(seed)
    out = []
    for order in range(count):
        book = gen.pick(books) + 1
        gen.pick(3)  # the event type: drawn, and irrelevant to every number
        out.append(Ev(order, book, gen.pick(3) + 1))
    return out


def hot_workload(count: int, seed: int) -> list[Ev]:
    gen = Generator(seed)
    out = []
    for order in range(count):
        book = 3 if gen.next() < 0.6 else gen.pick(6) + 1
        out.append(Ev(order, book, gen.pick(3) + 1))
    return out


def competing(events: list[Ev], workers: int) -> tuple[list[Done], list[int]]:
    free = [(0, w) for w in range(workers)]  # already a heap
    done = []
    for ev in events:
        at, w = heapq.heappop(free)
        heapq.heappush(free, (at + ev.duration, w))
        done.append(Done(at + ev.duration, w, *ev))
    loads = [0] * workers
    for at, w in free:
        loads[w] = at
    return sorted(done), loads


def partitioned(events: list[Ev], partitions: int) -> tuple[list[Done], list[int]]:
    queues: list[list[Ev]] = [[] for _ in range(partitions)]
    for ev in events:
        queues[ev.book % partitions].append(ev)
    done = []
    for p, queue in enumerate(queues):
        finishes = accumulate(ev.duration for ev in queue)
        done += [Done(t, p, *ev) for t, ev in zip(finishes, queue, strict=True)]
    return sorted(done), [sum(ev.duration for ev in q) for q in queues]


def pair_inversions(done: list[Done]) -> tuple[int, int]:
    late = [(a, b) for a, b in combinations(done, 2) if a.order > b.order]
    return len(late), sum(1 for a, b in late if a.book == b.book)


def _mean(values: list[int]) -> float | None:
    return to_fixed_1(sum(values) / len(values)) if values else None


def _whole(x: float | None) -> object:
    return int(x) if x is not None and x.is_integer() else x


def tables(
    *,
    events: int,
    seed: int,
    books: int,
    workers: list[int],
    partitions: list[int],
    hot_events: int,
    hot_seed: int,
    hot_partitions: list[int],
) -> dict[str, list[Row]]:
    evs = main_events(events, seed, books)
    result: dict[str, list[Row]] = {"competing": [], "partitioned": [], "hot_key": []}
    for w in workers:
        done, loads = competing(evs, w)
        result["competing"].append([w, max(loads), *pair_inversions(done)])
    for p in partitions:
        done, loads = partitioned(evs, p)
        text = " ".join(map(str, loads))
        result["partitioned"].append([p, max(loads), *pair_inversions(done), text])
    hot = hot_workload(hot_events, hot_seed)
    for p in hot_partitions:
        _, loads = partitioned(hot, p)
        result["hot_key"].append([p, max(loads), " ".join(map(str, loads))])

    # two partitions: book 3 sits in partition 1 with books 1, 5, 7, ...
    in_hot = [ev for ev in hot if ev.book % 2 == 1]
    starts = [0, *accumulate(ev.duration for ev in in_hot)]
    waits = [s for s, ev in zip(starts, in_hot, strict=False) if ev.book != 3]
    others = [ev.duration for ev in in_hot if ev.book != 3]
    alone = [0, *accumulate(others)][: len(others)]
    result["head_of_line"] = [[len(others), _whole(_mean(waits)), _whole(_mean(alone))]]
    result["workload"] = [[len(evs), len({ev.book for ev in evs})]]
    hot_only = [ev.duration for ev in hot if ev.book == 3]
    result["hot_workload"] = [
        [len(hot), sum(ev.duration for ev in hot), 3, len(hot_only), sum(hot_only)]
    ]
    return result
