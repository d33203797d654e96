"""A job whose work-horse was cut off is handed back to its queue, not lost."""

from __future__ import annotations

import django_rq
import pytest
from rq import Queue, Retry
from rq.job import JobStatus as RqStatus
from rq.registry import FailedJobRegistry

from course.instruments.probe_jobs import die_always
from jobs.supervision import rq_maintenance

pytestmark = pytest.mark.django_db


def plain_queue() -> Queue:
    # rq's own queue: django-rq's would hold the enqueue until the test's commit.
    return Queue("default", connection=django_rq.get_connection("default"))


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
