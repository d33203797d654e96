"""Open event streams and long polls cost a real daphne no thread each.

Hundreds of clients hang on one daphne at once; its thread count stays that of an
idle server, every stream still gets the next event, and when the clients leave
every place under REALTIME_MAX_STREAMS comes back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from django.db import connection

from config.processes import wait_until
from jobs.services import jobstatus_create
from library.services import stock_correct
from tests.processes import lab_daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

STREAMS = 300
POLLS = 100
# An idle daphne here has about ten: its main thread, Twisted's and asgiref's
# pools as far as they have grown, the realtime read pool. One per stream would be
# hundreds.
MOST_THREADS = 20


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(
        next(x for x in status.splitlines() if x.startswith("Threads:")).split()[1]
    )


async def _open(
    port: int, path: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


async def _until(reader: asyncio.StreamReader, marker: bytes) -> bytes:
    return await asyncio.wait_for(reader.readuntil(marker), 60)


@pytest.fixture
def daphne(redis_client, library):
    # Hundreds of clients from one address: more than one client's share.
    with lab_daphne(REALTIME_STREAMS_PER_CLIENT="0") as served:
        yield served


def _skip_offsets(count: int) -> None:
    """Move the outbox's id sequence on: the next message comes far after the head,
    as on a busy PostgreSQL (a window is counted in messages, not in offsets)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('messaging_outboxmessage', 'id'),"
            " nextval(pg_get_serial_sequence('messaging_outboxmessage', 'id')) + %s)",
            [count],
        )


def test_hundreds_of_open_streams_hold_no_thread_each(daphne):
    port, process = daphne
    _skip_offsets(5000)
    job = jobstatus_create(kind="lab", name="threads-test", params={})
    metrics = f"http://127.0.0.1:{port}/realtime/metrics"

    def admitted() -> int:
        return int(httpx.get(metrics, timeout=20).json()["process"]["admitted"])

    def log_reads() -> int:
        return int(httpx.get(metrics, timeout=20).json()["process"]["log_reads"])

    async def clients() -> tuple[int, list[bytes]]:
        streams = [
            await _open(port, "/realtime/branches/1/events") for _ in range(STREAMS)
        ]
        polls = [
            await _open(
                port, f"/realtime/jobs/{job.pk}/wait?version=1&timeout_ms=30000"
            )
            for _ in range(POLLS)
        ]
        for reader, _ in streams:
            await _until(reader, b"event: state")
        await asyncio.to_thread(
            wait_until, lambda: admitted() == STREAMS + POLLS, "every client admitted"
        )
        threads = threads_of(process.pid)
        reads = await asyncio.to_thread(log_reads)
        # One change reaches every stream: each is alive, not merely counted.
        await asyncio.to_thread(stock_correct, book_id=1, on_shelf=1)
        events = [
            await _until(reader, b"event: stock_corrected") for reader, _ in streams
        ]
        # ... and the streams shared one read of the log for it.
        assert await asyncio.to_thread(log_reads) - reads == 1
        for _, writer in streams + polls:
            writer.close()
        return threads, events

    threads, events = asyncio.run(clients())
    assert threads < MOST_THREADS, f"{threads} threads for {STREAMS + POLLS} clients"
    assert len(events) == STREAMS
    wait_until(lambda: admitted() == 0, "every place given back")
