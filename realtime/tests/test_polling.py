"""Short and long polling of job status, against a real daphne over real sockets."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import RequestFactory, override_settings

from config.processes import wait_until
from jobs.models import JobStatus
from jobs.services import jobstatus_create, jobstatus_progress
from realtime.polling import counters_read
from realtime.views import job_wait
from tests.processes import lab_daphne

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def job(redis_client) -> JobStatus:
    return jobstatus_create(kind="lab", name="polling-test", params={})


@pytest.fixture
def server(job):
    with (
        lab_daphne() as (port, _),
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client,
    ):
        # The first request loads the URLconf and opens a database connection;
        # the tests time the ones after it.
        client.get(f"/realtime/jobs/{job.pk}/status?version=0")
        yield client


def delta(before: dict[str, int]) -> dict[str, int]:
    after = counters_read()
    return {
        name: after[name] - before[name]
        for name in after
        if after[name] != before[name]
    }


@pytest.mark.processes
def test_short_poll_answers_at_once_and_counts_empty_answers(server, job):
    before = counters_read()
    statuses = [
        server.get(f"/realtime/jobs/{job.pk}/status?version=1").status_code
        for _ in range(5)
    ]
    jobstatus_progress(job_id=job.pk, progress=10, message="one step")
    answer = server.get(f"/realtime/jobs/{job.pk}/status?version=1")
    assert statuses == [204] * 5
    assert answer.status_code == 200
    assert (answer.json()["version"], answer.json()["progress"]) == (2, 10.0)
    assert answer.headers["cache-control"] == "no-store"
    assert delta(before) == {"short_requests": 6, "short_empty": 5}


@pytest.mark.processes
def test_long_poll_is_held_until_the_limit_then_204(server, job):
    before = counters_read()
    started = time.monotonic()
    answer = server.get(f"/realtime/jobs/{job.pk}/wait?version=1&timeout_ms=800")
    held = time.monotonic() - started
    assert answer.status_code == 204
    assert answer.content == b""
    assert 0.75 <= held < 3.0
    assert delta(before) == {"long_requests": 1, "long_empty": 1}


@pytest.mark.processes
def test_long_poll_answers_when_the_job_changes(server, job):
    answers: list[tuple[httpx.Response, float]] = []

    def poll() -> None:
        answer = server.get(f"/realtime/jobs/{job.pk}/wait?version=1&timeout_ms=10000")
        answers.append((answer, time.monotonic()))

    def waiting() -> int:
        url = server.base_url.join("/realtime/metrics")
        return int(httpx.get(url, timeout=20).json()["process"]["waiting"])

    client = threading.Thread(target=poll)
    client.start()
    try:
        # The change comes while the server holds the poll, not before it.
        wait_until(lambda: waiting() == 1, "the server holds the long poll")
        changed = time.monotonic()
        jobstatus_progress(job_id=job.pk, progress=40, message="moved")
    finally:
        client.join(timeout=30)
    answer, answered = answers[0]
    assert answer.status_code == 200
    assert (answer.json()["version"], answer.json()["message"]) == (2, "moved")
    # Answered at the change (plus one look of the hub), not at the 10 s limit.
    assert answered - changed < 2.5


@pytest.mark.processes
def test_long_poll_answers_a_client_behind_at_once(server, job):
    jobstatus_progress(job_id=job.pk, progress=20)
    before = counters_read()
    started = time.monotonic()
    answer = server.get(f"/realtime/jobs/{job.pk}/wait?version=1&timeout_ms=10000")
    assert answer.status_code == 200
    assert answer.json()["version"] == 2
    assert time.monotonic() - started < 1.0
    assert delta(before) == {"long_requests": 1}


@pytest.mark.processes
def test_bad_versions_get_a_clear_400_and_unknown_jobs_404(server, job):
    for path in ("status", "wait"):
        for bad in ("abc", "-1", "1.5", "9" * 40, "%C2%B2"):
            answer = server.get(f"/realtime/jobs/{job.pk}/{path}?version={bad}")
            assert answer.status_code == 400, (path, bad)
            assert "version must be a whole number" in answer.json()["error"]
        missing = server.get(f"/realtime/jobs/{uuid.uuid4()}/{path}?version=1")
        assert (missing.status_code, missing.json()) == (404, {"error": "no such job"})
    answer = server.get(f"/realtime/jobs/{job.pk}/wait?version=1&timeout_ms=soon")
    assert answer.status_code == 400
    assert "timeout_ms" in answer.json()["error"]


@override_settings(REALTIME_LONG_POLL_MAX_MS=300)
def test_long_poll_hold_is_capped_by_the_setting(job):
    request = RequestFactory().get("/", {"version": "1", "timeout_ms": "60000"})
    # Its starter asks (jobs.access): a view called directly has no middleware.
    request.user = get_user_model().objects.create_user("starter")
    JobStatus.objects.filter(pk=job.pk).update(created_by=request.user)
    started = time.monotonic()
    answer = asyncio.run(job_wait(request, job.pk))
    assert answer.status_code == 204
    assert time.monotonic() - started < 1.5
