"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import time
from dataclasses import dataclass

from course.labs.backpressure.model import (
    LIVE_POLICY,
    LIVE_POLICY_COLUMNS,
    LIVE_WORKERS,
    POLICIES,
    UNBOUNDED,
)
from course.labs.backpressure.params import BackpressureParams
from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LivePart,
    Progress,
    Tables,
    table,
)
from jobs.backpressure import Admission, BoundedQueue, BufferStats


def consume(ms: int) -> None:
    """The live lab's job: hold a work-horse for ``ms`` milliseconds."""
    time.sleep(ms / 1000)


@dataclass(frozen=True)
class Window:
    """What one bound did in one production window."""

    policy: str
    produced: int
    dropped: int
    held_ms: float  # how long the producer was held, in total
    stats: BufferStats  # the bound's own counters at the end of the window


@dataclass(frozen=True)
class Measurement:
    windows: list[Window]


def _live_policy(
    system: harness.LiveSystem,
    label: str,
    *,
    window_s: float,
    produce: int,
    capacity: int,
    job_ms: int,
) -> Window:
    """Produce for ``window_s`` into one bound; return what happened."""
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
    return Window(label, produced, dropped, held_ms, stats)


def live_check(params: BackpressureParams) -> str | None:
    """Refuse a stopped consumer: a live job's length is 2000 / consume_per_s ms."""
    if params.consume_per_s == 0:
        return (
            "consume_per_s: 0 (a stopped consumer) runs in the model only; the live "
            "workers need at least 1 job per second"
        )
    return None


def measure(params: BackpressureParams, progress: Progress) -> Measurement:
    """Produce into each bound of ``POLICIES`` in turn, on two real rq workers."""
    window_s = params.window_ms / 1000
    produce = params.produce_per_s
    job_ms = max(1, round(LIVE_WORKERS * 1000 / params.consume_per_s))
    run = harness.new_run_id()
    windows: list[Window] = []
    with harness.live_system(
        run=run, progress=progress, workers=LIVE_WORKERS, private_queue=True
    ) as system:
        for index, label in enumerate(POLICIES):
            harness.live_step(
                progress,
                0.1 + 0.2 * index,
                f"{label}: {produce}/s for {window_s:g} s into {LIVE_WORKERS} workers",
            )
            windows.append(
                _live_policy(
                    system,
                    label,
                    window_s=window_s,
                    produce=produce,
                    capacity=params.capacity,
                    job_ms=job_ms,
                )
            )
            # Let the jobs in the work-horses finish before the next window.
            time.sleep(min(1.0, 2 * job_ms / 1000))
    return Measurement(windows)


def tables(params: BackpressureParams, measured: Measurement) -> Tables:
    """One row per bound, in the columns of the model's ``policies``."""
    rows: list[list[Cell]] = [
        [
            window.policy,
            window.produced,
            window.stats["delivered"],
            window.dropped,
            window.stats["depth"],
            window.stats["peak"],
            window.stats["wait_max_ms"],
            round(window.held_ms),
            window.stats["wait_avg_ms"],
        ]
        for window in measured.windows
    ]
    return {"live_policies": table(LIVE_POLICY_COLUMNS, rows)}


LIVE = LivePart(check=live_check, measure=measure, tables=tables)
