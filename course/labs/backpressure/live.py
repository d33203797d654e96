"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import time

from course.labs.backpressure.model import (
    LIVE_POLICY,
    LIVE_POLICY_COLUMNS,
    LIVE_WORKERS,
    POLICIES,
    UNBOUNDED,
)
from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LabError,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from jobs.backpressure import Admission, BoundedQueue


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
    consume = int_param(params, "consume_per_s")
    if consume == 0:
        # A live job's length is 2000 / consume_per_s ms: a stopped consumer has none.
        raise LabError(
            "consume_per_s: 0 (a stopped consumer) runs in the model only; the live "
            "workers need at least 1 job per second"
        )
    job_ms = max(1, round(LIVE_WORKERS * 1000 / consume))
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
