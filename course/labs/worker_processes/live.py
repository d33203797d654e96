"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from itertools import pairwise
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
    LiveSystem,
    live_step,
    live_system,
    new_run_id,
    redis_connection,
)
from course.labs.harness.queueing import (
    WARMUP_SHARE,
    erlang_c_wait,
    kingman_wait,
    percentile,
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
# live_variability: a random stream short enough to wait for, on two real workers.
# A job holds its worker for its sleep plus rq's own work around it (fetching the
# job, recording its start and result) and whatever the machine's load adds; that
# is measured first (``CALIBRATION_JOBS`` back-to-back jobs), and each load's
# arrival rate is set from it, so "85 %" is 85 % of what the workers really finish.
LIVE_VARIABILITY_WORKERS = 2
LIVE_MEAN_MS = 40.0
LIVE_LOADS = (50, 70, 85)
LIVE_JOBS = 200
CALIBRATION_JOBS = 30
SAMPLE_S = 0.01  # how often the queue's length is read for L
LIVE_VARIABILITY_COLUMNS = [
    "utilisation_pct",
    "workers",
    "jobs",
    "service_ms",
    "arrivals_per_s",
    "mean_wait_ms",
    "p50_wait_ms",
    "p99_wait_ms",
    "measured_l",
    "lambda_times_w",
    "kingman_wait_ms",
    "erlang_c_wait_ms",
]


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


@dataclass(frozen=True)
class _Stream:
    """One load's arrival instants (s from the start) and job durations (ms)."""

    offsets: list[float]
    durations: list[int]


def _stream(seed: int, utilisation_pct: int, service_ms: float) -> _Stream:
    """Poisson arrivals at this load of the measured service, exponential sleeps."""
    arrivals = random.Random(f"{seed}:live-arrivals:{utilisation_pct}")
    services = random.Random(f"{seed}:live-service:{utilisation_pct}")
    rate_per_s = LIVE_VARIABILITY_WORKERS * utilisation_pct / 100 * 1000 / service_ms
    offsets: list[float] = []
    clock = 0.0
    for _ in range(LIVE_JOBS):
        clock += arrivals.expovariate(rate_per_s)
        offsets.append(clock)
    durations = [max(1, round(services.expovariate(1 / LIVE_MEAN_MS))) for _ in offsets]
    return _Stream(offsets, durations)


def _feed(
    system: LiveSystem, redis: Redis, probe: str, stream: _Stream
) -> tuple[list[float], list[int]]:
    """Enqueue the stream on time; return enqueue instants and sampled lengths.

    Between arrivals the queue's length (jobs no worker has taken yet) is read
    every ``SAMPLE_S`` once the warm-up has arrived: the mean of those readings is
    L, measured on the queue itself and not from any job's wait.
    """
    queue = system.private_queue
    assert queue is not None
    warm = math.ceil(LIVE_JOBS * WARMUP_SHARE)
    enqueued: list[float] = []
    samples: list[int] = []
    began = time.monotonic()
    next_sample = began
    for seq, (offset, ms) in enumerate(
        zip(stream.offsets, stream.durations, strict=True)
    ):
        due = began + offset
        while (now := time.monotonic()) < due:
            if now < next_sample:
                time.sleep(min(due, next_sample) - now)
                continue
            if seq > warm:
                samples.append(int(redis.llen(queue.key)))
            next_sample += SAMPLE_S
        # Wall clock, as the job records its own start with time.time().
        enqueued.append(time.time())
        system.enqueue(io_job, probe, seq, ms, job_id=f"{probe}-{seq}")
    return enqueued, samples


def _calibrate(system: LiveSystem, run: str) -> float:
    """Return how long one job of ``LIVE_MEAN_MS`` holds a worker, in ms.

    The jobs are enqueued at once, so each worker takes its next job as soon as it
    can: the time between one job's start and the same worker's next start is the
    whole cost of a job, rq's part and the machine's delays included.
    """
    redis = redis_connection()
    probe = f"{run}-calibration"
    for seq in range(CALIBRATION_JOBS):
        system.enqueue(io_job, probe, seq, round(LIVE_MEAN_MS), job_id=f"{probe}-{seq}")
    _wait_for(
        lambda: redis.llen(f"jobprobe:{probe}") >= CALIBRATION_JOBS, "the calibration"
    )
    records = _records(redis, probe)
    redis.delete(f"jobprobe:{probe}")
    by_worker: dict[float, list[float]] = {}
    for record in records:
        by_worker.setdefault(record["pid"], []).append(record["start"])
    spans: list[float] = []
    for starts in by_worker.values():
        ordered = sorted(starts)
        spans += [(b - a) * 1000 for a, b in pairwise(ordered)]
    if not spans:
        raise LabError("live: the calibration jobs all ran on one start; try again")
    return max(LIVE_MEAN_MS, sum(spans) / len(spans))


def _variability_row(
    system: LiveSystem, run: str, utilisation_pct: int, seed: int, service_ms: float
) -> list[Cell]:
    """Feed one load's stream to the running workers; return its row."""
    redis = redis_connection()
    probe = f"{run}-{utilisation_pct}"
    stream = _stream(seed, utilisation_pct, service_ms)
    enqueued, samples = _feed(system, redis, probe, stream)
    _wait_for(lambda: redis.llen(f"jobprobe:{probe}") >= LIVE_JOBS, "the stream")
    system.check_workers()
    records = _records(redis, probe)
    redis.delete(f"jobprobe:{probe}")
    started = {int(r["seq"]): r["start"] for r in records}
    warm = math.ceil(LIVE_JOBS * WARMUP_SHARE)
    waits = sorted(
        (started[seq] - enqueued[seq]) * 1000 for seq in range(warm, LIVE_JOBS)
    )
    span_s = enqueued[-1] - enqueued[warm]
    rate = (LIVE_JOBS - 1 - warm) / span_s if span_s > 0 else 0.0
    mean_ms = sum(waits) / len(waits)
    measured_l = sum(samples) / len(samples) if samples else 0.0
    rho = utilisation_pct / 100
    # The sleep is exponential (its spread is its mean); rq's part is about constant,
    # so the whole service time varies less than an exponential one: cs < 1.
    kingman = kingman_wait(
        LIVE_VARIABILITY_WORKERS,
        rho,
        service_ms,
        arrival_cv=1.0,
        service_cv=LIVE_MEAN_MS / service_ms,
    )
    expected = erlang_c_wait(LIVE_VARIABILITY_WORKERS, rho, service_ms)
    return [
        utilisation_pct,
        LIVE_VARIABILITY_WORKERS,
        LIVE_JOBS - warm,
        round(service_ms, 1),
        round(rate, 2),
        round(mean_ms, 1),
        round(percentile(waits, 0.5), 1),
        round(percentile(waits, 0.99), 1),
        round(measured_l, 2),
        round(rate * mean_ms / 1000, 2),
        round(kingman, 1),
        round(expected, 1),
    ]


def _live_variability(seed: int, progress: Progress) -> list[list[Cell]]:
    """The three loads on one pair of workers, each after the last has drained."""
    run = new_run_id()
    rows: list[list[Cell]] = []
    with live_system(
        run=run,
        progress=progress,
        workers=LIVE_VARIABILITY_WORKERS,
        private_queue=True,
        messaging=False,
        simple=True,
    ) as system:
        live_step(progress, 0.72, "timing what one job costs a worker")
        service_ms = _calibrate(system, run)
        for index, pct in enumerate(LIVE_LOADS):
            live_step(progress, 0.75 + 0.07 * index, f"a random stream at {pct}%")
            rows.append(_variability_row(system, run, pct, seed, service_ms))
    return rows


def live(params: Params, progress: Progress) -> Tables:

    jobs = int_param(params, "jobs")
    job_ms = int_param(params, "job_ms")
    rows: list[list[Cell]] = []
    counts = int_list_param(params, "workers")
    for index, workers in enumerate(counts):
        live_step(progress, 0.1 + 0.6 * index / len(counts), f"{workers} workers")
        rows.append(_live_pool_row(workers, jobs, job_ms, progress))
    supervision = _live_supervision(progress)
    variability = _live_variability(int_param(params, "seed"), progress)
    return {
        "live_pool": table(
            ["workers", "jobs", "slices", "span_ms", "processes_used"], rows
        ),
        "live_supervision": table(
            ["completed", "dead_letter", "crashing_job_attempts", "workers_alive"],
            [supervision],
        ),
        "live_variability": table(LIVE_VARIABILITY_COLUMNS, variability),
    }
