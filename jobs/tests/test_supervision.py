"""A lab run whose worker died is retried, and its row never stays "running"."""

from __future__ import annotations

import datetime

import django_rq
import pytest
from django.utils import timezone
from rq import Queue, Retry
from rq.job import JobStatus as RqStatus
from rq.registry import FailedJobRegistry

from course.instruments.probe_jobs import die_always
from jobs.models import JobStatus
from jobs.supervision import jobstatus_reconcile, rq_job_id, rq_maintenance

pytestmark = pytest.mark.django_db


def plain_queue() -> Queue:
    # rq's own queue: django-rq's would hold the enqueue until the test's commit.
    return Queue("default", connection=django_rq.get_connection("default"))


def lab_row(**fields: object) -> JobStatus:
    return JobStatus.objects.create(kind="lab", name="worker-processes", **fields)


def test_a_row_whose_rq_job_failed_is_marked_failed(redis_client) -> None:
    row = lab_row(state="running")
    queue = plain_queue()
    job = queue.enqueue(die_always, "reconcile", 1, job_id=rq_job_id(row))
    job.set_status(RqStatus.FAILED)
    assert jobstatus_reconcile() == 1
    row.refresh_from_db()
    assert row.state == "failed"
    assert row.error.startswith("The job stopped for good")


def test_a_lost_queue_entry_fails_only_after_a_while(redis_client) -> None:
    row = lab_row(state="queued")
    assert jobstatus_reconcile() == 0  # may still be on its way to Redis
    later = timezone.now() + datetime.timedelta(minutes=6)
    assert jobstatus_reconcile(now=later) == 1
    row.refresh_from_db()
    assert (row.state, row.error) == ("failed", "Its queue entry was lost.")


def test_finished_rows_and_other_kinds_are_left_alone(redis_client) -> None:
    done = lab_row(state="done")
    report = JobStatus.objects.create(kind="report", name="monthly", state="running")
    later = timezone.now() + datetime.timedelta(hours=1)
    assert jobstatus_reconcile(now=later) == 0
    assert JobStatus.objects.get(pk=done.pk).state == "done"
    assert JobStatus.objects.get(pk=report.pk).state == "running"


def test_maintenance_hands_back_an_abandoned_job(redis_client) -> None:
    queue = plain_queue()
    job = queue.enqueue(die_always, "abandoned", 1, retry=Retry(max=1))
    # What a cold shutdown leaves: started, its registry entry already expired.
    job.set_status(RqStatus.STARTED)
    registry = queue.started_job_registry
    redis_client.zadd(registry.key, {f"{job.id}:cut-off": 1})  # job:execution
    rq_maintenance()
    assert job.get_status(refresh=True) == RqStatus.QUEUED  # retried, not dropped
    assert job.id not in FailedJobRegistry(queue=queue).get_job_ids()
