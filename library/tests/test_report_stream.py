"""The streamed loan report: access, body, markers, failure, disconnect, pace."""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.asgi import get_asgi_application
from django.test import AsyncClient, Client

from config.processes import (
    child_environment,
    free_port,
    start_daphne,
    stop,
    wait_until,
)
from library.models import Book, Branch, Loan, Member
from library.permissions import RUN_REPORT, permission_get
from library.report import stream as streaming
from library.report.stream import REPORTS_KEY

pytestmark = [pytest.mark.django_db(transaction=True)]
URL = "/realtime/reports/loans.csv"
PASSWORD = "correct-horse-battery"


@pytest.fixture
def loans(redis_client):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    dune = Book.objects.create(id=1, title="Dune", author="H", branch=branch)
    quoted = Book.objects.create(id=2, title='Say "hi", Bob', author="X", branch=branch)
    member = Member.objects.create(
        id=1, first_name="A", last_name="B", registered_at=datetime.date(2024, 1, 1)
    )
    made = [
        Loan(book=dune, member=member, pickup_date=datetime.date(2026, 1, day))
        for day in range(1, 26)
    ]
    made.append(
        Loan(book=quoted, member=member, pickup_date=datetime.date(2026, 1, 31))
    )
    made.append(Loan(book=dune, member=member, pickup_date=datetime.date(2026, 2, 1)))
    Loan.objects.bulk_create(made)
    desk = get_user_model().objects.create_user(
        "desk", password=PASSWORD, is_staff=True
    )
    desk.user_permissions.add(permission_get(RUN_REPORT))
    get_user_model().objects.create_user("reader", password=PASSWORD)


async def body_of(response) -> str:
    return b"".join([part async for part in response.streaming_content]).decode()


async def staff_client() -> AsyncClient:
    client = AsyncClient()
    await client.alogin(username="desk", password=PASSWORD)
    return client


async def test_anonymous_is_sent_to_login_and_a_reader_is_refused(loans):
    response = await AsyncClient().get(URL, {"month": "2026-01"})
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
    reader = AsyncClient()
    await reader.alogin(username="reader", password=PASSWORD)
    assert (await reader.get(URL, {"month": "2026-01"})).status_code == 403


@pytest.mark.parametrize("month", ["", "2026-13", "2026-1", "26-01", "x"])
async def test_a_bad_month_is_a_clear_400(loans, month):
    response = await (await staff_client()).get(URL, {"month": month})
    assert response.status_code == 400
    assert response.content == b"month must look like 2026-01\n"


async def test_the_month_streams_as_csv_with_a_completion_marker(loans, monkeypatch):
    monkeypatch.setattr(streaming, "CHUNK_ROWS", 10)  # three chunks for 26 rows
    response = await (await staff_client()).get(URL, {"month": "2026-01"})
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["X-Accel-Buffering"] == "no"
    assert not response.has_header("Content-Length")
    lines = (await body_of(response)).splitlines()
    assert lines[0] == "loan_id,pickup_date,return_date,book_id,title,branch,member_id"
    assert len(lines) == 1 + 26 + 1
    assert lines[1].split(",")[1:] == ["2026-01-01", "", "1", "Dune", "Central", "1"]
    assert lines[-2].endswith(',2026-01-31,,2,"Say ""hi"", Bob",Central,1')
    assert lines[-1] == "# complete: 26 rows"


async def test_the_buffered_form_has_a_length_and_the_same_body(loans):
    client = await staff_client()
    streamed = await body_of(await client.get(URL, {"month": "2026-01"}))
    buffered = await client.get(URL, {"month": "2026-01", "form": "buffered"})
    assert not buffered.streaming
    assert int(buffered["Content-Length"]) == len(buffered.content)
    assert buffered.content.decode() == streamed


async def test_a_failure_after_the_headers_ends_with_an_error_line(loans, monkeypatch):
    monkeypatch.setattr(streaming, "CHUNK_ROWS", 10)
    real = streaming._loan_chunk
    calls = []

    def failing(*args):
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("database went away")
        return real(*args)

    monkeypatch.setattr(streaming, "_loan_chunk", failing)
    response = await (await staff_client()).get(URL, {"month": "2026-01"})
    assert response.status_code == 200
    lines = (await body_of(response)).splitlines()
    assert len(lines) == 1 + 10 + 1
    assert lines[-1] == "# error: database went away; after 10 rows"
    assert not any(line.startswith("# complete") for line in lines)


def staff_cookie() -> bytes:
    client = Client()
    client.force_login(get_user_model().objects.get(username="desk"))
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def test_production_stops_when_the_client_disconnects(loans, monkeypatch):
    """Through Django's ASGI handler: a disconnect cancels the generator."""
    monkeypatch.setattr(streaming, "CHUNK_ROWS", 1)  # one row per chunk
    real = streaming._loan_chunk

    def slow(*args):
        time.sleep(0.02)
        return real(*args)

    monkeypatch.setattr(streaming, "_loan_chunk", slow)
    cookie = await asyncio.to_thread(staff_cookie)
    before = dict(streaming.PRODUCTION)
    disconnect = asyncio.Event()
    sent: list[dict[str, Any]] = []

    requested: list[bool] = []

    async def receive():
        if not requested:
            requested.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        bodies = [m for m in sent if m["type"] == "http.response.body"]
        if len(bodies) == 3:  # header line and two rows, then the client leaves
            disconnect.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "query_string": b"month=2026-01",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"cookie", cookie)],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    await asyncio.wait_for(get_asgi_application()(scope, receive, send), 10)
    produced = streaming.PRODUCTION["rows"] - before.get("rows", 0)
    assert 2 <= produced <= 4  # far from the 26 rows of the month
    assert streaming.PRODUCTION["abandoned"] - before.get("abandoned", 0) == 1
    assert streaming.PRODUCTION["completed"] == before.get("completed", 0)
    body = b"".join(m.get("body", b"") for m in sent)
    assert b"# complete" not in body


# --- a real daphne ----------------------------------------------------------------


def sign_in(port: int) -> str:
    import httpx

    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base) as client:
        client.get("/accounts/login/")
        client.post(
            "/accounts/login/",
            data={
                "login": "desk",
                "password": PASSWORD,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
            headers={"Referer": base + "/accounts/login/"},
        )
        return str(client.cookies["sessionid"])


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def open_report(port: int, session: str, query: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    request = (
        f"GET {URL}?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Cookie: sessionid={session}\r\nConnection: close\r\n\r\n"
    )
    sock.sendall(request.encode())
    return sock


@pytest.fixture
def big_month(loans):
    """100,000 loans in March 2026 (about 5.6 MB of CSV)."""
    book, member = Book.objects.get(pk=1), Member.objects.get(pk=1)
    day = datetime.date(2026, 3, 5)
    Loan.objects.bulk_create(
        (Loan(book=book, member=member, pickup_date=day) for _ in range(100_000)),
        batch_size=5000,
    )


@pytest.mark.processes
def test_a_slow_reader_keeps_server_memory_flat_and_gets_every_row(big_month):
    port = free_port()
    server = start_daphne(port, env={**child_environment(), "LOG_LEVEL": "WARNING"})
    try:
        session = sign_in(port)
        baseline = rss_kib(server.pid)
        sock = open_report(port, session, "month=2026-03")
        received = bytearray()
        peak = baseline
        # Slow for five seconds (about 300 KB/s, while the server can make the
        # report in two or three), then at full speed to the end.
        slow_until = time.monotonic() + 5
        while chunk := sock.recv(16 * 1024):
            received += chunk
            if time.monotonic() < slow_until:
                time.sleep(0.05)
                peak = max(peak, rss_kib(server.pid))
        sock.close()
        assert received.rstrip().endswith(b"# complete: 100000 rows\n\r\n0")
        assert b"Transfer-Encoding: chunked" in received[:1000]
        # The body is ~5.6 MB; the server held at most a few chunks of it.
        print(f"daphne RSS {baseline} KiB before, peak {peak} KiB while streaming")
        assert peak - baseline < 3 * 1024, (baseline, peak)
    finally:
        stop(server)


@pytest.mark.processes
def test_a_client_that_vanishes_stops_production_on_a_real_server(
    big_month, redis_client
):
    port = free_port()
    server = start_daphne(port, env={**child_environment(), "LOG_LEVEL": "WARNING"})
    try:
        session = sign_in(port)
        sock = open_report(port, session, "month=2026-03")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        # Reads nothing more: production must pause on the full buffers.
        wait_until(
            lambda: redis_client.hget(REPORTS_KEY, "paused"),
            "production pauses for the reader",
        )
        sock.close()
        wait_until(
            lambda: redis_client.hget(REPORTS_KEY, "abandoned"), "production stops"
        )
        counts = {
            k.decode(): int(v) for k, v in redis_client.hgetall(REPORTS_KEY).items()
        }
        assert counts["started"] == 1
        assert counts["abandoned"] == 1
        assert "completed" not in counts
        # 256 KiB of Twisted buffer and small socket buffers hold ~10,000 rows.
        assert counts["rows"] < 20_000, counts
        assert os.path.exists(f"/proc/{server.pid}")  # the server lives on
    finally:
        stop(server)
