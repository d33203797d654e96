"""A job's status is read only by its starter or by whom its kind's rule lets.

Every way a status is read is asked through the real ASGI application, as daphne
runs it: the poll of jobs (through Django), the real-time short poll (through
Django), and the long poll and the event stream, which ``realtime.front`` serves
before Django's middleware, so it must find the session itself. A refusal is a
404, the answer for a job that does not exist.
"""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import Client

# Imported at module level: loading it sets Django up again (see test_stream_limits).
from config.asgi import application
from jobs.models import JobStatus
from jobs.services import jobstatus_create
from library.permissions import RUN_REPORT, permission_get
from library.report import REPORT_KIND, REPORT_NAME
from tests.asgi import http_scope

pytestmark = pytest.mark.django_db(transaction=True)

LESSON = "cache-layers"


def status_urls(job_id: object) -> list[str]:
    return [
        f"/jobs/{job_id}/status",
        f"/realtime/jobs/{job_id}/status",
        f"/realtime/jobs/{job_id}/wait",
        f"/realtime/jobs/{job_id}/events",
    ]


def answer_status(path: str, client: Client | None = None) -> int:
    """Return the status the ASGI application answers ``path`` with, for ``client``.

    Only the start of the answer is read: an event stream is then left at once.
    """
    cookies = "; ".join(
        f"{k}={v.value}" for k, v in (client.cookies if client else {}).items()
    )
    headers = [(b"cookie", cookies.encode())] if cookies else []

    async def exchange() -> int:
        app = ApplicationCommunicator(application, http_scope(path, headers=headers))
        await app.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await app.receive_output(20)
        await app.send_input({"type": "http.disconnect"})
        await app.wait(timeout=20)
        return int(start["status"])

    return async_to_sync(exchange)()


def statuses(job_id: object, client: Client | None = None) -> list[int]:
    return [answer_status(url, client) for url in status_urls(job_id)]


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def user(name: str, *, staff: bool = False, report_right: bool = False) -> User:
    made: User = get_user_model().objects.create_user(name, is_staff=staff)
    if report_right:
        made.user_permissions.add(permission_get(RUN_REPORT))
    return made


def lab_run(client: Client) -> str:
    """Run the lesson's lab as ``client`` through the lesson's own form."""
    response = client.post(f"/course/{LESSON}/run", {}, HTTP_ACCEPT="application/json")
    assert response.status_code == 202, response.content
    return str(response.json()["job"])


@pytest.fixture
def report(redis_client) -> JobStatus:
    owner = user("report-owner", staff=True, report_right=True)
    return jobstatus_create(kind=REPORT_KIND, name=REPORT_NAME, params={}, user=owner)


def test_a_report_is_refused_to_anyone_without_the_right(report):
    assert statuses(report.pk) == [404] * 4  # anonymous
    assert statuses(report.pk, signed_in(user("reader"))) == [404] * 4
    assert statuses(report.pk, signed_in(user("clerk", staff=True))) == [404] * 4


def test_a_report_is_read_by_its_starter_and_by_holders_of_the_right(report):
    assert report.created_by is not None
    assert statuses(report.pk, signed_in(report.created_by)) == [200] * 4
    other = user("other-operator", report_right=True)
    assert statuses(report.pk, signed_in(other)) == [200] * 4


def test_an_anonymous_visitor_reads_their_own_lab_run_and_no_one_elses(redis_client):
    visitor_a, visitor_b = Client(), Client()
    run_a, run_b = lab_run(visitor_a), lab_run(visitor_b)
    assert statuses(run_a, visitor_a) == [200] * 4
    assert statuses(run_b, visitor_b) == [200] * 4
    assert statuses(run_b, visitor_a) == [404] * 4
    assert statuses(run_a, visitor_b) == [404] * 4
    assert statuses(run_a) == [404] * 4  # no session at all
    assert statuses(run_a, signed_in(user("learner"))) == [404] * 4


def test_a_signed_in_learner_reads_their_run_and_others_do_not(redis_client):
    learner = user("learner")
    client = signed_in(learner)
    run = lab_run(client)
    assert statuses(run, client) == [200] * 4
    assert statuses(run, Client()) == [404] * 4
    assert statuses(run, signed_in(user("someone", staff=True))) == [404] * 4


def test_an_unknown_job_is_the_same_404(redis_client):
    assert statuses(uuid.uuid4(), signed_in(user("reader"))) == [404] * 4
