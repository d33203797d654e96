"""Server-sent events from a real daphne: fields, heartbeat, resume, reset, 400s.

The heartbeat test runs the ASGI application in process, where the interval can be
set short; the others read a real daphne with httpx's streaming client.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, override_settings

from config.processes import (
    await_until,
    child_environment,
    free_port,
    start_daphne,
    stop,
    wait_until,
)
from jobs.models import JobStatus
from jobs.services import jobstatus_create, jobstatus_finish, jobstatus_progress
from library.models import Book, Branch
from library.services import stock_correct
from messaging.dispatch import LOG_CHANNEL
from messaging.models import LogRetention, OutboxMessage
from realtime.polling import DB_THREADS, LOG_GRACE
from realtime.sse import STREAMS
from tests.asgi import http_scope
from tests.processes import lab_daphne

# PostgreSQL reads the log behind a commit grace, SQLite does not: streams on each.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.each_database]


@pytest.fixture
def library(redis_client) -> Branch:
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=2)
    Branch.objects.create(id=2, name="Konak", city="Izmir")
    Book.objects.create(id=2, title="Emma", author="Austen", branch_id=2, on_shelf=1)
    return branch


@pytest.fixture
def job(library) -> JobStatus:
    return jobstatus_create(kind="lab", name="sse-test", params={})


@pytest.fixture
def daphne(job):
    with lab_daphne() as served:
        yield served


@pytest.fixture
def client(daphne) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{daphne[0]}", timeout=20) as c:
        yield c


class Reader:
    """Read one event stream block by block (a block ends with a blank line)."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.iter_lines()

    def block(self) -> list[str]:
        found: list[str] = []
        for line in self.lines:
            if line == "":
                if found:
                    return found
                continue
            found.append(line)
        return found

    def event(self) -> dict[str, str]:
        """Return the next event's fields, skipping comments and ``retry:``."""
        while True:
            block = self.block()
            if not block:
                return {}
            fields = dict(line.split(": ", 1) for line in block if ": " in line)
            if "data" in fields:
                return fields


def recount(times: int) -> list[int]:
    """Correct book 1's shelf count (same count) ``times`` times; return offsets.

    On PostgreSQL the streams read a message only once it is older than the commit
    grace (realtime.polling.LOG_GRACE): wait that long, so the offsets are readable.
    """
    for _ in range(times):
        stock_correct(book_id=1, on_shelf=2)
    if connection.vendor == "postgresql":
        time.sleep(LOG_GRACE.total_seconds() + 0.2)
    return list(
        OutboxMessage.objects.order_by("-id").values_list("id", flat=True)[:times]
    )[::-1]


def metrics(client: httpx.Client) -> dict[str, object]:
    return dict(client.get("/realtime/metrics").json()["process"])


@pytest.mark.processes
def test_job_stream_has_the_fields_headers_and_follows_progress(client, job):
    url = f"/realtime/jobs/{job.pk}/events"
    with client.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["x-accel-buffering"] == "no"
        assert "content-length" not in response.headers
        reader = Reader(response)
        assert reader.block() == ["retry: 2000"]
        assert reader.block() == [": heartbeat"]
        first = reader.event()
        assert (first["id"], first["event"]) == ("1", "job")
        assert json.loads(first["data"])["state"] == "queued"
        jobstatus_progress(job_id=job.pk, progress=50, message="half")
        second = reader.event()
        assert (second["id"], second["event"]) == ("2", "job")
        assert json.loads(second["data"])["progress"] == 50.0
        jobstatus_finish(job_id=job.pk, result={"ok": True})
        last = reader.event()
        assert last["id"] == "3"
        assert json.loads(last["data"])["finished"] is True
        assert reader.block() == []  # the server ends a finished job's stream
    # A client that already has the final version is told to stop reconnecting.
    done = client.get(url, headers={"Last-Event-ID": "3"})
    assert done.status_code == 204


@pytest.mark.processes
def test_job_stream_resumes_and_resets(client, job):
    url = f"/realtime/jobs/{job.pk}/events"
    jobstatus_progress(job_id=job.pk, progress=30)  # version 2
    # Behind: one event with the whole current state.
    with client.stream("GET", url, headers={"Last-Event-ID": "1"}) as response:
        event = Reader(response).event()
        assert (event["id"], event["event"]) == ("2", "job")
    # Current (query form, for a first connection): nothing until the next change.
    with client.stream("GET", f"{url}?lastEventId=2") as response:
        reader = Reader(response)
        jobstatus_progress(job_id=job.pk, progress=60)
        event = reader.event()
        assert event["id"] == "3"
        assert json.loads(event["data"])["progress"] == 60.0
    # The header wins over the query (EventSource keeps the URL when reconnecting).
    with client.stream(
        "GET", f"{url}?lastEventId=1", headers={"Last-Event-ID": "99"}
    ) as response:
        event = Reader(response).event()
        assert (event["id"], event["event"]) == ("3", "reset")
        data = json.loads(event["data"])
        assert (data["reason"], data["job"]["version"]) == ("unknown id", 3)


@pytest.mark.processes
def test_branch_stream_resumes_from_the_outbox_log(client, library):
    Book.objects.filter(pk=2).update(on_shelf=1)
    offsets = recount(3)
    other = stock_correct(book_id=2, on_shelf=4)  # another branch: never sent
    url = "/realtime/branches/1/events"
    with client.stream(
        "GET", url, headers={"Last-Event-ID": str(offsets[0] - 1)}
    ) as response:
        reader = Reader(response)
        seen = [reader.event() for _ in range(3)]
    assert [int(e["id"]) for e in seen] == offsets
    assert {e["event"] for e in seen} == {"stock_corrected"}
    assert json.loads(seen[0]["data"]) == {
        "book_id": 1,
        "branch_id": 1,
        "on_shelf": 2,
        "book_version": 2,
        "branch_version": 1,
        "branch_total": 2,
    }
    assert other.branch_id == 2
    # Three more while nobody listens; resuming from the last id gets exactly them.
    later = recount(3)
    with client.stream("GET", url, headers={"Last-Event-ID": seen[-1]["id"]}) as resp:
        reader = Reader(resp)
        resumed = [reader.event() for _ in range(3)]
        assert [int(e["id"]) for e in resumed] == later
        # And live ones keep coming on the same connection.
        (live,) = recount(1)
        assert int(reader.event()["id"]) == live


@pytest.mark.processes
def test_branch_stream_without_id_gets_state_and_old_id_gets_reset(client, library):
    offsets = recount(4)
    with client.stream("GET", "/realtime/branches/1/events") as response:
        event = Reader(response).event()
    assert (int(event["id"]), event["event"]) == (offsets[-1], "state")
    assert json.loads(event["data"])["total"] == 2
    LogRetention.objects.update_or_create(
        pk=1, defaults={"earliest_offset": offsets[2]}
    )
    # offsets[0] + 1 is gone: the events in between cannot be replayed.
    with client.stream(
        "GET", "/realtime/branches/1/events", headers={"Last-Event-ID": str(offsets[0])}
    ) as response:
        event = Reader(response).event()
    assert (int(event["id"]), event["event"]) == (offsets[-1], "reset")
    data = json.loads(event["data"])
    assert data["reason"] == "older than the log keeps"
    assert data["state"]["books"] == {"1": 2}
    # offsets[1] + 1 is still kept: a plain resume.
    with client.stream(
        "GET", "/realtime/branches/1/events", headers={"Last-Event-ID": str(offsets[1])}
    ) as response:
        event = Reader(response).event()
    assert (int(event["id"]), event["event"]) == (offsets[2], "stock_corrected")
    # Beyond the head: unknown.
    with client.stream(
        "GET", "/realtime/branches/1/events", headers={"Last-Event-ID": "999999"}
    ) as response:
        event = Reader(response).event()
    assert event["event"] == "reset"
    assert json.loads(event["data"])["reason"] == "unknown id"


@pytest.mark.processes
def test_bad_last_event_ids_get_a_clear_400(client, job):
    for url in (f"/realtime/jobs/{job.pk}/events", "/realtime/branches/1/events"):
        for bad in ("abc", "-3", "1e3", "7" * 30, "٣".encode()):
            answer = client.get(url, headers={"Last-Event-ID": bad})
            assert answer.status_code == 400, (url, bad)
            assert answer.json()["error"] == (
                "Last-Event-ID must be a whole number (0 or more)"
            )
        answer = client.get(f"{url}?lastEventId=x")
        assert answer.status_code == 400
        assert "lastEventId" in answer.json()["error"]
    assert client.get("/realtime/branches/99/events").status_code == 404
    missing = "/realtime/jobs/00000000-0000-0000-0000-000000000000/events"
    assert client.get(missing).status_code == 404


def _db_descriptors(pid: int, database: str) -> int:
    count = 0
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(entry).startswith(database):
                count += 1
        except OSError:
            continue
    return count


@pytest.mark.processes
def test_vanished_clients_leave_no_stream_and_idle_streams_hold_no_connection(
    daphne, client, job
):
    port, process = daphne
    base = f"http://127.0.0.1:{port}"
    urls = [f"{base}/realtime/jobs/{job.pk}/events"] * 10
    urls += [f"{base}/realtime/branches/1/events"] * 10
    clients = [httpx.Client(timeout=20) for _ in urls]
    streams = []
    readers = []  # a dropped line iterator would close its response
    try:
        for one, url in zip(clients, urls, strict=True):
            stream = one.stream("GET", url)
            readers.append(Reader(stream.__enter__()))
            streams.append(stream)
            assert readers[-1].event()["event"] in ("job", "state")
        assert metrics(client)["open_streams"] == 20
        if connection.vendor == "sqlite":
            database = str(connection.settings_dict["NAME"])
            samples = []
            for _ in range(10):
                samples.append(_db_descriptors(process.pid, database))
                time.sleep(0.1)
            # At most the pool's connections (file, -wal, -shm each), whatever the
            # number of streams: 20 streams with one each would hold 60.
            assert max(samples) <= 3 * DB_THREADS, samples
    finally:
        for stream in streams:
            stream.__exit__(None, None, None)
        for one in clients:
            one.close()
    wait_until(lambda: metrics(client)["open_streams"] == 0, "every stream closed")
    assert metrics(client)["streams_started"] == 20


async def _receive_body(app: ApplicationCommunicator, timeout: float) -> str:
    message = await app.receive_output(timeout)
    if message["type"] == "http.response.start":
        message = await app.receive_output(timeout)
    return bytes(message.get("body", b"")).decode()


@pytest.fixture
def starter_cookie(job: JobStatus) -> tuple[bytes, bytes]:
    """Make the job a user's and return their session cookie (jobs.access)."""
    starter = get_user_model().objects.create_user("starter")
    JobStatus.objects.filter(pk=job.pk).update(created_by=starter)
    client = Client()
    client.force_login(starter)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


@override_settings(REALTIME_SSE_HEARTBEAT_S=0.2)
async def test_heartbeat_comes_at_a_random_interval_and_disconnect_stops_it(
    job, starter_cookie
):
    from config.asgi import application

    path = f"/realtime/jobs/{job.pk}/events"
    scope = http_scope(path, "lastEventId=1", headers=[starter_cookie])
    app = ApplicationCommunicator(application, scope)
    await app.send_input({"type": "http.request", "body": b"", "more_body": False})
    assert await _receive_body(app, 5) == "retry: 2000\n\n"
    assert await _receive_body(app, 5) == ": heartbeat\n\n"
    assert STREAMS.open == 1
    gaps = []
    last = time.monotonic()
    for _ in range(3):
        assert await _receive_body(app, 5) == ": heartbeat\n\n"
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    # 1.0-1.2 times the interval, plus a little scheduling. One heartbeat read late
    # shortens the next gap by as much, so the lower bound is on the sum.
    assert all(0.1 <= gap < 0.6 for gap in gaps), gaps
    assert sum(gaps) >= 3 * 0.19, gaps
    await app.send_input({"type": "http.disconnect"})
    await await_until(lambda: STREAMS.open == 0, "the stream closed")
    await app.wait(timeout=5)


@pytest.mark.processes
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="only PostgreSQL reads behind a grace"
)
def test_an_id_not_readable_yet_is_resumed_not_reset(client, library):
    """Within the commit grace the newest ids exist but are not readable yet: a
    client holding one waits for what follows instead of getting a reset."""
    for _ in range(2):
        stock_correct(book_id=1, on_shelf=2)
    first, second = OutboxMessage.objects.order_by("-id").values_list("id", flat=True)[
        :2
    ][::-1]
    headers = {"Last-Event-ID": str(first)}
    with client.stream("GET", "/realtime/branches/1/events", headers=headers) as resp:
        event = Reader(resp).event()
    assert (int(event["id"]), event["event"]) == (second, "stock_corrected")


@pytest.mark.processes
def test_a_commit_wakes_the_streams_without_waiting_for_the_poll(library, redis_client):
    """A commit announces itself (``messaging.dispatch.published``): with a poll
    interval of a minute, the event still arrives at once."""
    port = free_port()
    # A minute between polls and no heartbeat: the client's 20 s read timeout
    # fails the test unless the announcement wakes the stream.
    env = {
        **child_environment(),
        "REALTIME_POLL_INTERVAL_MS": "60000",
        "REALTIME_SSE_HEARTBEAT_S": "120",
    }
    process = start_daphne(port, env=env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as http:
            url = "/realtime/branches/1/events"
            with http.stream("GET", url) as response:
                reader = Reader(response)
                assert reader.event()["event"] == "state"
                # The hub subscribes once a stream waits: commit only after that.
                wait_until(
                    lambda: redis_client.pubsub_numsub(LOG_CHANNEL)[0][1] >= 1,
                    "the hub's subscription to the outbox announcements",
                )
                stock_correct(book_id=1, on_shelf=1)
                # Well inside the minute the next poll would take.
                event = reader.event()
        assert event["event"] == "stock_corrected"
    finally:
        stop(process)
