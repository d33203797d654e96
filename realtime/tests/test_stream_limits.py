"""Past REALTIME_MAX_STREAMS a process refuses streams and long polls with a 503.

The ASGI application runs in this process (as daphne would run it), so the test
holds streams open, sees the refusal, and sees each place come back when a client
leaves, whether it left mid-stream or its long poll answered.
"""

from __future__ import annotations

import resource

import pytest
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

# Imported here, not in a test: loading it sets Django up again, and that resets the
# logging configuration, dropping the handler pytest's caplog puts on the root.
from config.asgi import application
from config.processes import await_until
from jobs.models import JobStatus
from jobs.services import jobstatus_create
from realtime.limits import Holder, descriptor_report, streams_open
from tests.asgi import http_scope

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def job(redis_client, library) -> JobStatus:
    starter = get_user_model().objects.create_user("starter")
    return jobstatus_create(kind="lab", name="limits-test", params={}, user=starter)


@pytest.fixture
def cookie(job: JobStatus) -> tuple[bytes, bytes]:
    """The session cookie of the job's starter: only they may read its status."""
    client = Client()
    assert job.created_by is not None
    client.force_login(job.created_by)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def _get(
    path: str,
    query: str = "",
    cookie: tuple[bytes, bytes] | None = None,
    *,
    client: str = "127.0.0.1",
    session: str = "",
) -> ApplicationCommunicator:
    """A request from ``client``, with the starter's ``cookie`` or a ``session`` key."""
    headers = [cookie] if cookie else []
    if session:
        headers = [(b"cookie", f"sessionid={session}".encode())]
    scope = http_scope(path, query, headers=headers)
    scope["client"] = (client, 50000)
    return ApplicationCommunicator(application, scope)


async def _start(app: ApplicationCommunicator) -> dict[str, object]:
    await app.send_input({"type": "http.request", "body": b"", "more_body": False})
    return await app.receive_output(10)


def _headers(start: dict[str, object]) -> dict[bytes, bytes]:
    pairs = start["headers"]
    assert isinstance(pairs, list)
    return {bytes(name).lower(): bytes(value) for name, value in pairs}


@override_settings(REALTIME_MAX_STREAMS=2)
async def test_streams_past_the_maximum_get_503_and_places_come_back(
    job, cookie, caplog
):
    assert streams_open() == 0
    events = f"/realtime/jobs/{job.pk}/events"
    first = _get(events, "lastEventId=1", cookie)
    second = _get("/realtime/branches/1/events", "", cookie)
    assert (await _start(first))["status"] == 200
    assert (await _start(second))["status"] == 200
    assert streams_open() == 2

    refused = await _start(third := _get(events, "lastEventId=1", cookie))
    assert refused["status"] == 503
    assert _headers(refused)[b"retry-after"] == b"5"
    poll = await _start(_get(f"/realtime/jobs/{job.pk}/wait", "version=1", cookie))
    assert poll["status"] == 503
    await third.wait(timeout=5)
    assert streams_open() == 2  # a refusal takes no place
    # Two refusals, one warning, and no server error logged for them.
    said = [r for r in caplog.records if r.levelname in {"WARNING", "ERROR"}]
    assert [r.getMessage() for r in said] == [
        "refusing streams: 2 open, REALTIME_MAX_STREAMS reached"
    ]

    await first.send_input({"type": "http.disconnect"})
    await await_until(lambda: streams_open() == 1, "the left stream's place")
    again = _get(events, "lastEventId=1", cookie)
    assert (await _start(again))["status"] == 200
    for app in (second, again):
        await app.send_input({"type": "http.disconnect"})
    await await_until(lambda: streams_open() == 0, "every place back")


@override_settings(REALTIME_STREAMS_PER_CLIENT=3, REALTIME_STREAMS_PER_SESSION=2)
async def test_one_client_gets_429_past_its_share_of_the_process(job, cookie, caplog):
    # Alice is the job's starter (only she may follow it); bob and carol are other
    # sessions at her address.
    alice = cookie[1].decode().removeprefix("sessionid=")
    events = f"/realtime/jobs/{job.pk}/events"
    held = [_get(events, "lastEventId=1", session=alice) for _ in range(2)]
    for app in held:
        assert (await _start(app))["status"] == 200
    # Alice's session has its two; her third is refused, whatever the route.
    refused = await _start(_get(events, "lastEventId=1", session=alice))
    assert refused["status"] == 429
    assert _headers(refused)[b"retry-after"] == b"5"
    poll = _get(f"/realtime/jobs/{job.pk}/wait", "version=1", session=alice)
    assert (await _start(poll))["status"] == 429
    # Another session at the same address takes the address's last place ...
    held.append(_get("/realtime/branches/1/events", session="bob"))
    assert (await _start(held[-1]))["status"] == 200
    # ... after which that address gets nothing more, with or without a session.
    for session in ("carol", ""):
        branch = "/realtime/branches/1/events"
        answer = await _start(_get(branch, "lastEventId=1", session=session))
        assert answer["status"] == 429
    # Another address is not held back by this one.
    elsewhere = _get("/realtime/branches/1/events", "lastEventId=1", client="192.0.2.7")
    assert (await _start(elsewhere))["status"] == 200
    assert streams_open() == 4  # refusals take no place
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    digest = Holder.of("", alice).session or ""
    assert said == [
        f"refusing streams of session {digest[:8]}:"
        " REALTIME_STREAMS_PER_SESSION reached (2)",
        "refusing streams of address 127.0.0.1: REALTIME_STREAMS_PER_CLIENT "
        "reached (3)",
    ]

    await held[0].send_input({"type": "http.disconnect"})
    await await_until(lambda: streams_open() == 3, "alice's first place back")
    again = _get(events, "lastEventId=1", session=alice)
    assert (await _start(again))["status"] == 200
    for app in (*held[1:], elsewhere, again):
        await app.send_input({"type": "http.disconnect"})
    await await_until(lambda: streams_open() == 0, "every place back")


@override_settings(REALTIME_MAX_STREAMS=1)
async def test_a_long_poll_holds_a_place_until_it_answers(job, cookie):
    poll = _get(f"/realtime/jobs/{job.pk}/wait", "version=1&timeout_ms=300", cookie)
    await poll.send_input({"type": "http.request", "body": b"", "more_body": False})
    await await_until(lambda: streams_open() == 1, "the long poll's place")
    events = f"/realtime/jobs/{job.pk}/events"
    refused = await _start(_get(events, "lastEventId=1", cookie))
    assert refused["status"] == 503
    assert (await poll.receive_output(10))["status"] == 204
    await await_until(lambda: streams_open() == 0, "the answered poll's place")


def test_a_too_low_open_files_limit_is_reported(settings, monkeypatch):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    settings.REALTIME_MAX_STREAMS = 100
    assert descriptor_report() is None  # 300 descriptors: any machine has them
    monkeypatch.setattr(resource, "setrlimit", _refuse)
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, hard))
    warning = descriptor_report()
    assert warning is not None
    assert "ulimit -n) is 256" in warning
    assert "below the 300 descriptors" in warning


def _refuse(*_: object) -> None:
    raise ValueError("not allowed")
