"""Carry out waiting lab runs in the test's own process, as a worker slot would."""

from __future__ import annotations

from django.test import Client

from course.labworker import LabWorker
from course.models import LabRun
from course.visitors import TOKEN_KEY, anonymous_visitor
from jobs.models import JobStatus

TEST_WORKER = "test-host:1"


def worker(name: str = TEST_WORKER) -> LabWorker:
    return LabWorker(live_slots=1, model_slots=1, lease_s=30.0, name=name)


def run_waiting(*, live: bool | None = None, name: str = TEST_WORKER) -> int:
    """Run every waiting run (of one kind, or both); return how many ran."""
    slots = worker(name)
    ran = 0
    for kind in (False, True) if live is None else (live,):
        while slots.step(live=kind):
            ran += 1
    return ran


def own_run(client: Client, job: JobStatus) -> LabRun:
    """Record ``job`` as a run of the test client's anonymous session, its owner."""
    session = client.session
    session[TOKEN_KEY] = "test-token"
    session.save()
    return LabRun.objects.create(
        job=job, slug=job.name, visitor=anonymous_visitor(client.session)
    )
