"""Lab for "Backpressure": a producer faster than its consumer, four queue policies.

Model part (the course's ``simulation.mjs`` and ``stream.mjs``, ported literally):

1. ``policies`` — a virtual clock advances one millisecond at a time for
   ``window_ms``; integer accumulators rise by ``produce_per_s`` and
   ``consume_per_s`` every millisecond and release one job per thousand. The queue
   is unbounded, or bounded at ``capacity`` with tail drop, head drop or blocking
   (a blocked job is not produced; the producer waits a millisecond and the
   accumulator keeps rising). ``producer_wait_ms`` counts the blocked milliseconds.
2. ``producer_signal`` — node:stream's Writable with a 16 KiB high-water mark and
   sixty-four 1 KiB writes, each taking 5 ms: a producer that stops at ``write()``
   returning false and waits for ``drain`` keeps the buffer at the mark; one that
   ignores it buffers everything. ``writableLength`` counts the chunk being
   written, and ``drain`` fires once the buffer is empty. Course constants.

Live part (``live_policies``): the same four policies on a real bounded queue
(``jobs.backpressure.BoundedQueue``) in front of a private rq queue drained by two
real rq worker processes. The lab's process produces ``produce_per_s`` jobs per
second for ``window_ms``; each job sleeps ``2000 / consume_per_s`` ms, so two
workers would drain ``consume_per_s`` per second if forking a work-horse were free
(it is not: the measured drain is slower). Unbounded is the same bound with a
capacity no run reaches; tail drop is ``drop_newest``, head drop ``drop_oldest``,
block is ``block`` with the rest of the window as its timeout. At the end of the
window: delivered = jobs started, remaining = jobs still waiting, dropped = refused
plus displaced, peak and the longest enqueue → start wait from the bound's own
counters in Redis, with the mean wait (``average_wait_ms``); producer_wait_ms is the
time the producer was held.
"""

from __future__ import annotations

import time
from collections import deque

from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from jobs.backpressure import Admission, BoundedQueue, Policy

POLICIES = ("unbounded", "tail-drop", "head-drop", "block")
POLICY_COLUMNS = [
    "policy",
    "produced",
    "delivered",
    "dropped",
    "remaining",
    "peak",
    "longest_wait_ms",
    "producer_wait_ms",
]
# The live table adds the mean wait of the delivered jobs: one slow fork of a work
# horse moves the longest wait a lot, and the mean hardly.
LIVE_POLICY_COLUMNS = [*POLICY_COLUMNS, "average_wait_ms"]
# stream.mjs
CHUNK_BYTES = 1024
CHUNK_COUNT = 64
HIGH_WATER_MARK = 16 * 1024
# live
LIVE_WORKERS = 2
LIVE_POLICY: dict[str, Policy] = {
    "unbounded": "drop_newest",
    "tail-drop": "drop_newest",
    "head-drop": "drop_oldest",
    "block": "block",
}
UNBOUNDED = 10**9


def simulate(
    policy: str, *, window: int, produce: int, consume: int, capacity: int
) -> list[Cell]:
    """Return one ``policies`` row: the course's ``run(policy)``."""
    queue: deque[int] = deque()
    produced = delivered = dropped = blocked = 0
    peak = longest_wait = 0
    produce_acc = consume_acc = 0
    for t in range(1, window + 1):
        produce_acc += produce
        while produce_acc >= 1000:
            produce_acc -= 1000
            produced += 1
            if policy == "unbounded" or len(queue) < capacity:
                queue.append(t)
            elif policy == "tail-drop":
                dropped += 1
            elif policy == "head-drop":
                queue.popleft()
                dropped += 1
                queue.append(t)
            else:  # block: the producer waits
                produced -= 1
                produce_acc += 1000
                blocked += 1
                break
        consume_acc += consume
        while consume_acc >= 1000 and queue:
            consume_acc -= 1000
            longest_wait = max(longest_wait, t - queue.popleft())
            delivered += 1
        peak = max(peak, len(queue))
    return [
        policy,
        produced,
        delivered,
        dropped,
        len(queue),
        peak,
        longest_wait,
        blocked,
    ]


def writable(*, listening: bool) -> tuple[int, int]:
    """Return (full signals, buffer peak bytes) of stream.mjs's producer."""
    length = 0  # writableLength: buffered bytes, the chunk being written included
    full_signals = peak = 0
    for _ in range(CHUNK_COUNT):
        length += CHUNK_BYTES
        has_room = length < HIGH_WATER_MARK
        peak = max(peak, length)
        if not has_room:
            full_signals += 1
            if listening:
                length = 0  # "drain": everything buffered has been written
    return full_signals, peak


def model(params: Params, progress: Progress) -> Tables:
    window = int_param(params, "window_ms")
    produce = int_param(params, "produce_per_s")
    consume = int_param(params, "consume_per_s")
    capacity = int_param(params, "capacity")
    rows: list[list[Cell]] = []
    for index, policy in enumerate(POLICIES):
        progress(index / 5, f"policy {policy}")
        rows.append(
            simulate(
                policy,
                window=window,
                produce=produce,
                consume=consume,
                capacity=capacity,
            )
        )
    progress(0.8, "stream write() and drain")
    signal_rows: list[list[Cell]] = []
    for mode in ("listening", "ignoring"):
        full, peak = writable(listening=mode == "listening")
        signal_rows.append([mode, full, peak])
    return {
        "policies": table(POLICY_COLUMNS, rows),
        "producer_signal": table(
            ["mode", "full_signals", "buffer_peak_bytes"], signal_rows
        ),
    }


# --- live ----------------------------------------------------------------------------


def consume(ms: int) -> None:
    """The live lab's job: hold a work-horse for ``ms`` milliseconds."""
    time.sleep(ms / 1000)


def _live_policy(
    system: harness.LiveSystem,
    label: str,
    *,
    window_s: float,
    produce: int,
    capacity: int,
    job_ms: int,
) -> list[Cell]:
    """Produce for ``window_s`` into one bound; return its ``live_policies`` row."""
    queue = system.private_queue
    assert queue is not None
    bounded = BoundedQueue(
        queue,
        capacity=UNBOUNDED if label == "unbounded" else capacity,
        policy=LIVE_POLICY[label],
        name=f"{queue.name}-{label}",
    )
    bounded.reset()
    produced = dropped = 0
    held_ms = 0.0
    started = time.monotonic()
    end = started + window_s
    sequence = 0
    while True:
        due = started + sequence / produce
        now = time.monotonic()
        if due >= end or now >= end:
            break
        if due > now:
            time.sleep(due - now)
        bounded.block_timeout_s = max(0.0, end - time.monotonic())
        answer: Admission = bounded.enqueue(
            consume, job_ms, job_id=f"{queue.name}-{label}-{sequence}"
        )
        sequence += 1
        held_ms += answer.held_ms
        if not answer.accepted and label == "block":
            break  # the window ended while held: the job was never produced
        produced += 1
        if answer.dropped_job_id is not None:
            dropped += 1
        system.check_workers()
    stats = bounded.stats()
    queue.empty()  # type: ignore[no-untyped-call]
    return [
        label,
        produced,
        stats["delivered"],
        dropped,
        stats["depth"],
        stats["peak"],
        stats["wait_max_ms"],
        round(held_ms),
        stats["wait_avg_ms"],
    ]


def live(params: Params, progress: Progress) -> Tables:
    window_s = int_param(params, "window_ms") / 1000
    produce = int_param(params, "produce_per_s")
    capacity = int_param(params, "capacity")
    job_ms = max(1, round(LIVE_WORKERS * 1000 / int_param(params, "consume_per_s")))
    run = harness.new_run_id()
    rows: list[list[Cell]] = []
    with harness.live_system(
        run=run, progress=progress, workers=LIVE_WORKERS, private_queue=True
    ) as system:
        for index, label in enumerate(POLICIES):
            harness.live_step(
                progress,
                0.1 + 0.2 * index,
                f"{label}: {produce}/s for {window_s:g} s into {LIVE_WORKERS} workers",
            )
            rows.append(
                _live_policy(
                    system,
                    label,
                    window_s=window_s,
                    produce=produce,
                    capacity=capacity,
                    job_ms=job_ms,
                )
            )
            # Let the jobs in the work-horses finish before the next window.
            time.sleep(min(1.0, 2 * job_ms / 1000))
    return {"live_policies": table(LIVE_POLICY_COLUMNS, rows)}


LAB = Lab(
    slug="backpressure",
    title="Backpressure",
    params=(
        Param(
            "window_ms",
            "int",
            10000,
            "length of the run (ms)",
            minimum=100,
            maximum=120_000,
        ),
        Param(
            "produce_per_s",
            "int",
            100,
            "jobs produced per second",
            minimum=1,
            maximum=2000,
        ),
        Param(
            "consume_per_s",
            "int",
            60,
            "jobs consumed per second",
            minimum=1,
            maximum=2000,
        ),
        Param(
            "capacity",
            "int",
            100,
            "the bounded queue's capacity",
            minimum=1,
            maximum=100_000,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="policies",
            label="policy",
            values=("delivered", "dropped", "remaining"),
            title="Where the rate mismatch is written down",
            unit="jobs",
        ),
        Chart(
            table="policies",
            label="policy",
            values=("longest_wait_ms", "producer_wait_ms"),
            title="Longest job wait and producer wait",
            unit="ms",
        ),
    ),
    notes=(
        "The live part produces into a real bounded queue (jobs.backpressure) in "
        "front of two real rq worker processes, one window per policy."
    ),
)
