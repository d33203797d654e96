"""Real rq worker processes: graceful and cold shutdown, dead work-horses, the pool.

Each test starts ``manage.py rqworker`` (or ``rqworker-pool``) as a subprocess on the
test's Redis database and signals it the way a deployment tool or the kernel would.
"""

from __future__ import annotations

import datetime
import json
import signal
import subprocess
import time
from pathlib import Path

import django_rq
import pytest
from redis import Redis
from rq import Retry, Worker
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, StartedJobRegistry

from config.processes import kill, start_manage, wait_until
from course.instruments.probe_jobs import (
    die_always,
    die_once,
    io_job,
    sleep_then_mark,
    slow_while_token,
)

pytestmark = [pytest.mark.processes]
QUEUE = "default"
# rq ignores a second SIGTERM less than this long after the first (a pool's double
# signal), by the worker's own clock (``rq.worker.base.request_force_stop``).
REPEAT_IGNORED = datetime.timedelta(seconds=1)


def warm_shutdown_at(connection: Redis) -> datetime.datetime | None:
    """When a busy worker handled its first SIGTERM, as rq recorded it (UTC)."""
    for found in Worker.all(connection=connection):
        if (at := found.shutdown_requested_date) is not None:
            return at
    return None


def status(job: Job) -> JobStatus:
    return job.get_status(refresh=True)


def worker(*extra: str) -> subprocess.Popen[bytes]:
    return start_manage("rqworker", QUEUE, *extra)


def test_sigterm_lets_the_job_in_hand_finish(redis_client, tmp_path: Path) -> None:
    marker = tmp_path / "done"
    job = django_rq.get_queue(QUEUE).enqueue(sleep_then_mark, 1.5, str(marker))
    process = worker()
    try:
        wait_until(lambda: status(job) == JobStatus.STARTED, "job started")
        process.send_signal(signal.SIGTERM)  # the deployment's stop: warm shutdown
        assert process.wait(timeout=30) == 0
    finally:
        kill(process)
    assert marker.read_text() == "finished"
    assert status(job) == JobStatus.FINISHED


def test_a_second_signal_cuts_the_job_and_rq_hands_it_back(
    redis_client, tmp_path: Path
) -> None:
    token, marker = tmp_path / "hang", tmp_path / "done"
    token.write_text("x")
    queue = django_rq.get_queue(QUEUE)
    job = queue.enqueue(slow_while_token, str(token), str(marker), retry=Retry(max=1))
    process = worker()
    try:
        wait_until(lambda: status(job) == JobStatus.STARTED, "job started")
        process.send_signal(signal.SIGTERM)
        # The repeat counts once REPEAT_IGNORED has passed since rq handled the
        # first: rq records that moment, and the worker's clock is this host's.
        first = wait_until(
            lambda: warm_shutdown_at(queue.connection), "the first signal handled"
        )
        wait_until(
            lambda: datetime.datetime.now(datetime.UTC) >= first + REPEAT_IGNORED,
            "rq's window for a repeated signal ends",
        )
        process.send_signal(signal.SIGTERM)  # cold shutdown: the horse goes too
        assert process.wait(timeout=30) == 0
    finally:
        kill(process)
    assert not marker.exists()  # cut off mid-job
    # Not dropped: it stays "started" until its registry entry expires, then rq's
    # maintenance treats it as abandoned and retries it (run here for a far future).
    registry = StartedJobRegistry(queue=queue)
    assert job.id in registry.get_job_ids()
    token.unlink()
    registry.cleanup(timestamp=time.time() + 24 * 3600)
    assert status(job) == JobStatus.QUEUED
    fresh = worker("--burst")
    try:
        assert fresh.wait(timeout=60) == 0
    finally:
        kill(fresh)
    assert (status(job), marker.read_text()) == (JobStatus.FINISHED, "finished")


def test_a_dead_work_horse_is_retried_then_dead_lettered(
    redis_client, tmp_path: Path
) -> None:
    token = tmp_path / "die"
    token.write_text("x")
    queue = django_rq.get_queue(QUEUE)
    survivor = queue.enqueue(die_once, str(token), retry=Retry(max=1))
    doomed = queue.enqueue(die_always, "deaths", 1, retry=Retry(max=1))
    healthy = queue.enqueue(io_job, "deaths", 2, 10)
    process = worker("--burst")
    try:
        assert process.wait(timeout=90) == 0  # the worker outlives both deaths
    finally:
        kill(process)
    assert status(survivor) == JobStatus.FINISHED  # the retry ran on a fresh horse
    assert status(healthy) == JobStatus.FINISHED
    assert status(doomed) == JobStatus.FAILED
    assert doomed.id in FailedJobRegistry(queue=queue).get_job_ids()
    deaths = [json.loads(e) for e in redis_client.lrange("jobprobe:deaths", 0, -1)]
    assert sum(1 for e in deaths if e.get("died")) == 2  # two attempts, then out


def test_the_worker_pool_runs_jobs_in_several_workers(redis_client) -> None:
    queue = django_rq.get_queue(QUEUE)
    jobs = [queue.enqueue(io_job, "pool", seq, 300) for seq in range(6)]
    pool = start_manage("rqworker-pool", QUEUE, "--num-workers", "2")
    try:
        wait_until(
            lambda: all(status(j) == JobStatus.FINISHED for j in jobs), "pool jobs"
        )
        pool.send_signal(signal.SIGTERM)
        pool.wait(timeout=30)
    finally:
        kill(pool)
    records = [json.loads(e) for e in redis_client.lrange("jobprobe:pool", 0, -1)]
    assert sorted(r["seq"] for r in records) == list(range(6))
    assert len({r["worker"] for r in records}) == 2
