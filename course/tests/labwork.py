"""Carry out waiting lab runs in the test's own process, as a worker slot would."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.conf import settings
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


def browser_owns(context: Any, base_url: str, *jobs: JobStatus) -> None:
    """Make ``jobs`` runs of a browser context's own anonymous session.

    A run is its owner's alone: a test that makes runs in the database and opens
    them in a browser gives the browser the session that owns them.
    """
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store[TOKEN_KEY] = "browser-test-token"
    store.save()
    visitor = anonymous_visitor(store)
    for job in jobs:
        LabRun.objects.create(job=job, slug=job.name, visitor=visitor)
    cookie = {"name": "sessionid", "value": str(store.session_key), "url": base_url}
    context.add_cookies([cookie])
