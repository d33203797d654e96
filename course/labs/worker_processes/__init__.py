"""Lab for "Worker Processes": how a pool's size and its supervisor shape the work.

Model part, the lesson's two measurements on a virtual clock:

1. ``pool`` — ``jobs`` equal I/O-bound jobs of ``job_ms`` each, pulled one at a time
   by 1, 2, 4 … workers (a free worker takes the next job). The duration is counted in
   slices of one job's length, rounded down as the lesson does, so the number does
   not depend on the machine: 12 jobs take 12, 6 and 3 slices.
2. ``supervision`` — the lesson's five jobs on two workers, the third of which kills
   the process running it. The supervisor replaces every dead worker and puts its job
   back until it has been tried ``MAX_ATTEMPTS`` times, then dead-letters it.

Live part, the same two questions asked of real rq workers:

- ``live_pool`` — 1, 2, 4 real worker processes (``labchild worker --simple``: jobs
  run inside the worker, as the lesson's workers run them, with no fork per job) on
  a private queue fed ``jobs`` jobs that sleep ``job_ms``. The duration runs from
  the first job's start to the last job's end, as the jobs themselves recorded it,
  so starting the processes is not counted (the lesson rounds that away).
- ``live_supervision`` — two forking rq workers (``rqworker``'s default: each job runs
  in a forked work-horse, and the worker process is its supervisor) get the five
  jobs; job 3 kills its work-horse with SIGKILL. rq sees the horse die, and with the
  job's retry policy (one retry, so two attempts) puts it back; the second death
  sends it to the failed-job registry, rq's dead letters. The four others complete,
  and the two worker processes outlive both deaths: what the lesson's pool does by
  spawning replacements, rq does by forking a fresh horse for the next job.
"""

from __future__ import annotations

import heapq
import json
import math
import time
from typing import TYPE_CHECKING

from course.labs.harness.base import (
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
from course.labs.harness.live import (
    live_step,
    live_system,
    new_run_id,
    redis_connection,
)
from jobs.probes import die_always, io_job

if TYPE_CHECKING:
    from redis import Redis

# The lesson's supervision run: five jobs, the third crashes whoever runs it.
SUPERVISED_JOBS = (1, 2, 3, 4, 5)
CRASHING_JOB = 3
MAX_ATTEMPTS = 2
INITIAL_WORKERS = 2


def pool_slices(jobs: int, workers: int, job_ms: int) -> int:
    """Return the slices ``jobs`` equal jobs take when ``workers`` pull them."""
    free_at = [0] * workers  # when each worker can take its next job (ms)
    heapq.heapify(free_at)
    finished = 0
    for _ in range(jobs):
        start = heapq.heappop(free_at)
        finished = max(finished, start + job_ms)
        heapq.heappush(free_at, start + job_ms)
    return math.floor(finished / job_ms)


def supervise() -> tuple[list[int], list[int], int, int]:
    """Run the lesson's supervision: (completed, dead letters, spawned, attempts).

    Order does not change the outcome: every healthy job completes once, the
    crashing one dies ``MAX_ATTEMPTS`` times and each death costs one replacement.
    """
    waiting = list(SUPERVISED_JOBS)
    attempts: dict[int, int] = {}
    completed: list[int] = []
    dead: list[int] = []
    spawned = INITIAL_WORKERS
    while waiting:
        job = waiting.pop(0)
        attempts[job] = attempts.get(job, 0) + 1
        if job != CRASHING_JOB:
            completed.append(job)
            continue
        spawned += 1  # the worker died with the job; the supervisor replaces it
        if attempts[job] < MAX_ATTEMPTS:
            waiting.append(job)
        else:
            dead.append(job)
    return sorted(completed), dead, spawned, attempts[CRASHING_JOB]


def _listing(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) or "-"


def model(params: Params, progress: Progress) -> Tables:
    jobs = int_param(params, "jobs")
    job_ms = int_param(params, "job_ms")
    pool_rows: list[list[Cell]] = []
    for workers in int_list_param(params, "workers"):
        pool_rows.append([workers, jobs, pool_slices(jobs, workers, job_ms)])
    progress(0.5, "pool")
    completed, dead, spawned, attempts = supervise()
    progress(1.0, "supervision")
    return {
        "pool": table(["workers", "jobs", "slices"], pool_rows),
        "supervision": table(
            ["completed", "dead_letter", "workers_spawned", "crashing_job_attempts"],
            [[_listing(completed), _listing(dead), spawned, attempts]],
        ),
    }


# --- live part ------------------------------------------------------------------------

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
    return [_listing(completed), _listing(dead), deaths, survivors]


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


LAB = Lab(
    slug="worker-processes",
    title="Worker Processes",
    params=(
        Param("jobs", "int", 12, "equal jobs in the queue", minimum=1, maximum=500),
        Param(
            "job_ms", "int", 100, "how long one job waits (ms)", minimum=1, maximum=5000
        ),
        Param(
            "workers",
            "int_list",
            [1, 2, 4],
            "pool sizes to compare",
            minimum=1,
            maximum=16,
            max_items=6,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="pool",
            label="workers",
            values=("slices",),
            title="Duration of the same jobs by pool size",
            unit="slices",
        ),
        Chart(
            table="live_pool",
            label="workers",
            values=("slices",),
            title="Measured on real rq workers",
            unit="slices",
        ),
    ),
)
