"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from rq import Retry
from rq.job import JobStatus

from config.processes import WaitTimeout, wait_until
from course.instruments.probe_jobs import die_always, io_job
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
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
from course.labs.worker_processes.params import WorkerProcessesParams

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


def _wait_for(check: Callable[[], object], what: str) -> None:
    try:
        wait_until(check, what, timeout=DONE_TIMEOUT_S, interval=0.05)
    except WaitTimeout:
        raise LabError(
            f"live: {what} did not finish within {DONE_TIMEOUT_S:.0f} s"
        ) from None


@dataclass(frozen=True)
class Pool:
    """One pool's run: its jobs' span (first start to last end) and processes."""

    workers: int
    jobs: int
    span_ms: float
    processes: int


@dataclass(frozen=True)
class Supervision:
    completed: list[int]
    dead: list[int]
    deaths: int  # work-horses the crashing job killed
    survivors: int  # worker processes still running afterwards


@dataclass(frozen=True)
class Load:
    """One load of the random stream, after its warm-up."""

    utilisation_pct: int
    service_ms: float  # what one job really costs a worker (calibrated)
    jobs: int
    arrivals_per_s: float
    waits_ms: list[float]  # sorted
    queue_lengths: list[int]  # the queue's length, read between arrivals


@dataclass(frozen=True)
class Measurement:
    pools: list[Pool]
    supervision: Supervision
    loads: list[Load]


def _live_pool(workers: int, jobs: int, job_ms: int, progress: Progress) -> Pool:
    if not jobs:
        return Pool(workers, 0, 0.0, 0)  # an empty queue: nothing to time
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
    return Pool(workers, jobs, span_ms, len({r["pid"] for r in records}))


def _live_supervision(progress: Progress) -> Supervision:
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
    return Supervision(completed, dead, deaths, survivors)


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


def _live_load(
    system: LiveSystem, run: str, utilisation_pct: int, seed: int, service_ms: float
) -> Load:
    """Feed one load's stream to the running workers; return what it waited."""
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
    return Load(utilisation_pct, service_ms, LIVE_JOBS - warm, rate, waits, samples)


def _variability_row(load: Load) -> list[Cell]:
    """Little's law on the measured queue beside Kingman's and Erlang C's waits."""
    service_ms, waits = load.service_ms, load.waits_ms
    mean_ms = sum(waits) / len(waits)
    samples = load.queue_lengths
    measured_l = sum(samples) / len(samples) if samples else 0.0
    rho = load.utilisation_pct / 100
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
        load.utilisation_pct,
        LIVE_VARIABILITY_WORKERS,
        load.jobs,
        round(service_ms, 1),
        round(load.arrivals_per_s, 2),
        round(mean_ms, 1),
        round(percentile(waits, 0.5), 1),
        round(percentile(waits, 0.99), 1),
        round(measured_l, 2),
        round(load.arrivals_per_s * mean_ms / 1000, 2),
        round(kingman, 1),
        round(expected, 1),
    ]


def _live_variability(seed: int, progress: Progress) -> list[Load]:
    """The three loads on one pair of workers, each after the last has drained."""
    run = new_run_id()
    loads: list[Load] = []
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
            loads.append(_live_load(system, run, pct, seed, service_ms))
    return loads


def measure(params: WorkerProcessesParams, progress: Progress) -> Measurement:
    """Time each pool, kill a work-horse under supervision, feed random streams."""
    pools: list[Pool] = []
    counts = params.workers
    for index, workers in enumerate(counts):
        live_step(progress, 0.1 + 0.6 * index / len(counts), f"{workers} workers")
        pools.append(_live_pool(workers, params.jobs, params.job_ms, progress))
    supervision = _live_supervision(progress)
    return Measurement(pools, supervision, _live_variability(params.seed, progress))


def tables(params: WorkerProcessesParams, measured: Measurement) -> Tables:
    """The pools in the model's slices, the supervision, the waits of each load."""
    rows: list[list[Cell]] = []
    for pool in measured.pools:
        if not pool.jobs:
            rows.append([pool.workers, 0, 0, 0, 0])  # nothing timed, no process
            continue
        slices = math.floor(pool.span_ms / params.job_ms)
        rows.append(
            [pool.workers, pool.jobs, slices, round(pool.span_ms), pool.processes]
        )
    supervised = measured.supervision
    return {
        "live_pool": table(
            ["workers", "jobs", "slices", "span_ms", "processes_used"], rows
        ),
        "live_supervision": table(
            ["completed", "dead_letter", "crashing_job_attempts", "workers_alive"],
            [
                [
                    listing(supervised.completed),
                    listing(supervised.dead),
                    supervised.deaths,
                    supervised.survivors,
                ]
            ],
        ),
        "live_variability": table(
            LIVE_VARIABILITY_COLUMNS,
            [_variability_row(load) for load in measured.loads],
        ),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
