"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

import heapq
import math

from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.queueing import (
    MILLISECONDS,
    scenario_of,
    scenario_row,
    variability_columns,
)
from course.labs.worker_processes.params import WorkerProcessesParams

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


def listing(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) or "-"


def load_label(workers: int, utilisation_pct: int) -> str:
    """Name a variability row: pool size and load ("4 at 90%")."""
    return f"{workers} at {utilisation_pct}%"


def variability(params: WorkerProcessesParams, progress: Progress) -> list[list[Cell]]:
    """One row per pool size and load: the same job stream, scaled to each."""
    rows: list[list[Cell]] = []
    pools = params.workers
    loads = params.utilisations
    mean_ms = float(params.job_ms)
    for index, workers in enumerate(pools):
        progress(0.6 + 0.4 * index / len(pools), f"variability: {workers} workers")
        scenario = scenario_of(params, servers=workers, mean_service=mean_ms)
        for pct in loads:
            row = scenario_row(scenario, pct, MILLISECONDS)
            rows.append([load_label(workers, pct), workers, *row])
    return rows


def model(params: WorkerProcessesParams, progress: Progress) -> Tables:
    jobs = params.jobs
    job_ms = params.job_ms
    pool_rows: list[list[Cell]] = []
    for workers in params.workers:
        pool_rows.append([workers, jobs, pool_slices(jobs, workers, job_ms)])
    progress(0.3, "pool")
    completed, dead, spawned, attempts = supervise()
    progress(0.6, "supervision")
    return {
        "pool": table(["workers", "jobs", "slices"], pool_rows),
        "supervision": table(
            ["completed", "dead_letter", "workers_spawned", "crashing_job_attempts"],
            [[listing(completed), listing(dead), spawned, attempts]],
        ),
        "variability": table(
            ["load", "workers", *variability_columns(MILLISECONDS)],
            variability(params, progress),
        ),
    }
