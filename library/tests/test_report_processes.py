"""The report on a real ``manage.py rqworker`` process: worker shutdown mid-report.

SIGTERM to the worker (a deploy's stop): rq records a warm shutdown in the worker's
Redis hash and waits for its work-horse; the report reads that at its next chunk
boundary, stops there as cancelled ("worker shutdown") and the worker exits. SIGTERM
to the work-horse itself (a whole-service signal reaches it too): the report's own
handler sets the flag, with the same result, and the worker lives on.
"""

from __future__ import annotations

import os
import signal

import pytest

from config.processes import child_environment, children, kill, start_manage, wait_until
from jobs.models import JobStatus
from library import report
from library.tests.test_report import LOANS, make_loans, row

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

CHUNK = 10
TIMEOUT_S = 120.0


def wait_for(check, what: str, timeout: float = TIMEOUT_S) -> None:
    wait_until(check, what, timeout=timeout)


def processed(job: JobStatus) -> int:
    checkpoint = row(job).checkpoint
    return int(checkpoint["processed"]) if checkpoint else 0


def worker(name: str, *extra: str):
    return start_manage(
        "rqworker", "default", "--name", name, *extra, env=child_environment()
    )


@pytest.fixture
def clean_days(redis_client) -> int:
    make_loans()
    job = report.monthly_report_start(month=report.ALL_MONTHS, chunk=CHUNK)
    assert report.report_execute(job_id=job.pk, announce=lambda *a: None) == "done"
    days = int(row(job).result["days"])
    JobStatus.objects.filter(pk=job.pk).delete()
    redis_client.flushdb()  # the enqueue of that in-process run
    return days


def resume_and_finish(job: JobStatus, name: str) -> None:
    report.report_resume(job_id=job.pk)
    process = worker(name, "--burst")
    try:
        process.wait(timeout=TIMEOUT_S)
    finally:
        kill(process)
    assert row(job).state == "done"


def test_sigterm_to_the_rqworker_cancels_at_the_next_chunk(clean_days):
    job = report.monthly_report_start(
        month=report.ALL_MONTHS, chunk=CHUNK, pause_ms=250
    )
    process = worker(f"report-term-{job.pk.hex[:6]}")
    try:
        wait_for(lambda: processed(job) >= 2 * CHUNK, "two chunks")
        os.kill(process.pid, signal.SIGTERM)  # the worker only, as `kill PID` does
        wait_for(lambda: row(job).is_finished, "the report to stop")
        assert process.wait(timeout=TIMEOUT_S) == 0  # warm shutdown completed
    finally:
        kill(process)
    stopped = row(job)
    assert stopped.state == "cancelled"
    assert stopped.cancel_reason == report.REASON_SHUTDOWN
    assert 2 * CHUNK <= processed(job) < LOANS
    assert processed(job) % CHUNK == 0
    resume_and_finish(job, f"report-resume-{job.pk.hex[:6]}")
    assert row(job).result["days"] == clean_days
    assert row(job).result["processed"] == LOANS


def test_sigterm_to_the_work_horse_cancels_and_the_worker_lives_on(clean_days):
    job = report.monthly_report_start(
        month=report.ALL_MONTHS, chunk=CHUNK, pause_ms=250
    )
    process = worker(f"report-horse-{job.pk.hex[:6]}")
    try:
        wait_for(lambda: processed(job) >= CHUNK, "one chunk")
        horses = children(process.pid)
        assert len(horses) == 1
        os.kill(horses[0], signal.SIGTERM)
        wait_for(lambda: row(job).is_finished, "the report to stop")
        stopped = row(job)
        assert stopped.cancel_reason == report.REASON_SHUTDOWN
        assert processed(job) < LOANS
        # The horse returned normally: its worker is still serving the queue, so
        # the resumed report runs on it.
        assert process.poll() is None
        report.report_resume(job_id=job.pk)
        wait_for(lambda: row(job).state == "done", "the resumed report")
    finally:
        kill(process)
    assert row(job).result["days"] == clean_days
