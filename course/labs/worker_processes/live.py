"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING

from course.instruments.probe_jobs import die_always, io_job
from course.labs.harness.base import (
    Cell,
    LabError,
    Params,
    Progress,
    Tables,
    int_list_param,
    int_param,
    table,
)
from course.labs.harness.live import (
    live_step,
    live_system,
    new_run_id,
    redis_connection,
)

if TYPE_CHECKING:
    from redis import Redis

from course.labs.worker_processes.model import (
    CRASHING_JOB,
    INITIAL_WORKERS,
    SUPERVISED_JOBS,
    listing,
)

DONE_TIMEOUT_S = 60.0


def _records(redis: Redis, run: str) -> list[dict[str, float]]:
    raw = redis.lrange(f"jobprobe:{run}", 0, -1)
    return [json.loads(item) for item in raw]


def _wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.05)
    raise LabError(f"live: {what} did not finish within {DONE_TIMEOUT_S:.0f} s")


def _live_pool_row(
    workers: int, jobs: int, job_ms: int, progress: Progress
) -> list[Cell]:
    if not jobs:
        return [workers, 0, 0, 0, 0]  # an empty queue: nothing to time, no process
    run = new_run_id()
    redis = redis_connection()
    with live_system(
        run=run,
        progress=progress,
        workers=workers,
        private_queue=True,
        messaging=False,
        simple=True,
    ) as system:
        for seq in range(jobs):
            system.enqueue(io_job, run, seq, job_ms, job_id=str(seq))
        _wait_for(lambda: redis.llen(f"jobprobe:{run}") >= jobs, "the pool's jobs")
        system.check_workers()
    records = _records(redis, run)
    redis.delete(f"jobprobe:{run}")
    span_ms = (max(r["end"] for r in records) - min(r["start"] for r in records)) * 1000
    pids = {r["pid"] for r in records}
    return [workers, jobs, math.floor(span_ms / job_ms), round(span_ms), len(pids)]


def _live_supervision(progress: Progress) -> list[Cell]:
    from rq import Retry
    from rq.job import JobStatus

    run = new_run_id()
    redis = redis_connection()
    with live_system(
        run=run, progress=progress, workers=INITIAL_WORKERS, private_queue=True,
        messaging=False,
    ) as system:  # fmt: skip
        live_step(progress, 0.8, "five jobs, the third kills its work-horse")
        queued = {}
        for seq in SUPERVISED_JOBS:
            if seq == CRASHING_JOB:
                job = system.enqueue(
                    die_always, run, seq, job_id=str(seq), retry=Retry(max=1)
                )
            else:
                job = system.enqueue(io_job, run, seq, 50, job_id=str(seq))
            queued[seq] = job

        def settled() -> bool:
            finals = (JobStatus.FINISHED, JobStatus.FAILED)
            return all(j.get_status(refresh=True) in finals for j in queued.values())

        _wait_for(settled, "the supervised jobs")
        system.check_workers()  # both worker processes outlived the deaths
        survivors = sum(1 for p in system.processes if p.poll() is None)
        # Read now: leaving the block deletes the private queue and its jobs.
        status = {seq: job.get_status(refresh=True) for seq, job in queued.items()}
    records = _records(redis, run)
    redis.delete(f"jobprobe:{run}")
    completed = sorted(s for s, st in status.items() if st == JobStatus.FINISHED)
    dead = sorted(s for s, st in status.items() if st == JobStatus.FAILED)
    deaths = sum(1 for r in records if r.get("died"))
    return [listing(completed), listing(dead), deaths, survivors]


def live(params: Params, progress: Progress) -> Tables:

    jobs = int_param(params, "jobs")
    job_ms = int_param(params, "job_ms")
    rows: list[list[Cell]] = []
    counts = int_list_param(params, "workers")
    for index, workers in enumerate(counts):
        live_step(progress, 0.1 + 0.6 * index / len(counts), f"{workers} workers")
        rows.append(_live_pool_row(workers, jobs, job_ms, progress))
    supervision = _live_supervision(progress)
    return {
        "live_pool": table(
            ["workers", "jobs", "slices", "span_ms", "processes_used"], rows
        ),
        "live_supervision": table(
            ["completed", "dead_letter", "crashing_job_attempts", "workers_alive"],
            [supervision],
        ),
    }
