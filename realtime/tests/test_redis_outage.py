"""Live shelf sockets across a Redis outage, on a Redis of the test's own.

A throwaway ``redis-server`` on a free port carries one daphne's channel layer,
cache and presence. Live pages are connected, the server is stopped and started
again on the same port (empty, as a restarted Redis without persistence is), and
the sockets must live through it: told that live updates are paused, no 1011, new
handshakes accepted rather than answered 500, then a new snapshot and broadcasts
again once Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import websockets
from websockets.typing import Origin

from config.processes import (
    await_until,
    child_environment,
    free_port,
    start_daphne,
    stop,
    wait_until,
)
from library.models import Book, Branch, Member

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

REDIS_SERVER = Path(sys.executable).parent / "redis-server"
SOCKETS = 6
# docs/architecture.md's promise: a page resynchronises soon after Redis comes back
# (0.9-2.9 s before this change, by reconnecting). Generous against a loaded
# machine; what was measured is printed.
RESYNC_BOUND_S = 6.0


class ThrowawayRedis:
    """A ``redis-server`` on ``port`` that the test stops and starts at will."""

    def __init__(self, port: int, directory: Path) -> None:
        self.port, self.directory = port, directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                str(REDIS_SERVER),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._answers, f"redis-server on {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None

    def _answers(self) -> bool:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[ThrowawayRedis]:
    server = ThrowawayRedis(free_port(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def daphne_on_own_redis(
    transactional_db: None, own_redis: ThrowawayRedis
) -> Iterator[int]:
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=5)
    Member.objects.create(
        id=1, first_name="Ada", last_name="L", registered_at=datetime.date(2024, 1, 1)
    )
    port = free_port()
    env = {
        **child_environment(),
        "REDIS_URL": own_redis.url,
        "LIBRARY_REDIS_DB": "0",
        "LIBRARY_LAB_ROUTES": "on",
        # Beats every second, so presence notices the outage and the return soon.
        "REALTIME_PRESENCE_TTL_S": "3",
    }
    server = start_daphne(port, env=env)
    try:
        yield port
    finally:
        stop(server)


class Page:
    """One live shelf socket and every frame it was sent, with arrival times."""

    def __init__(self, socket: websockets.ClientConnection) -> None:
        self.socket = socket
        self.frames: list[tuple[float, dict[str, object]]] = []
        self.closed_with: int | None = None
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.socket:
                self.frames.append((time.monotonic(), json.loads(raw)))
        except websockets.ConnectionClosed:
            pass
        self.closed_with = (
            self.socket.close_code if self.socket.close_code is not None else -1
        )

    def of_type(self, kind: str, since: float = 0.0) -> list[dict[str, object]]:
        return [f for t, f in self.frames if f["type"] == kind and t >= since]

    def first_at(self, kind: str, since: float) -> float | None:
        times = [t for t, f in self.frames if f["type"] == kind and t >= since]
        return min(times) if times else None


async def open_page(port: int, tab: int) -> Page:
    socket = await websockets.connect(
        f"ws://127.0.0.1:{port}/ws/branches/1/stock/?tab=outage-tab-{tab:04d}",
        origin=Origin(f"http://127.0.0.1:{port}"),
    )
    page = Page(socket)
    await await_until(lambda: page.of_type("snapshot"), "the first snapshot")
    return page


async def lab_broadcast(port: int) -> int:
    async with httpx.AsyncClient() as client:
        answer = await client.post(f"http://127.0.0.1:{port}/_lab/broadcast/1/")
    return answer.status_code


def test_live_sockets_pause_and_resync_across_a_redis_outage(
    daphne_on_own_redis: int, own_redis: ThrowawayRedis
) -> None:
    port = daphne_on_own_redis

    async def scenario() -> None:
        pages = [await open_page(port, tab) for tab in range(SOCKETS)]
        assert await lab_broadcast(port) == 202
        await await_until(
            lambda: all(page.of_type("update") for page in pages), "a first update"
        )

        down_at = time.monotonic()
        await asyncio.to_thread(own_redis.stop)
        await await_until(
            lambda: all(
                page.of_type("paused") or page.closed_with is not None for page in pages
            ),
            "every page told of the outage (or closed)",
        )
        assert [page.closed_with for page in pages] == [None] * SOCKETS
        # Presence, kept in Redis too, is unknown now (the next beat finds out).
        await await_until(
            # The last presence frame, not the last frame: another kind may follow
            # it on a loaded machine (the order of the two is not the point).
            lambda: all(
                page.of_type("presence")[-1:]
                == [{"type": "presence", "watching": None}]
                for page in pages
            ),
            "presence unknown on every page",
        )
        # Handshakes during the outage are accepted: a snapshot from the database,
        # then the news that live updates are paused; never a 500.
        late = [await open_page(port, 100 + n) for n in range(3)]
        await await_until(
            lambda: all(page.of_type("paused") for page in late),
            "the late pages told they are paused",
        )
        # Every socket still serves its page: a snapshot on request.
        for page in [*pages, *late]:
            await page.socket.send(json.dumps({"action": "snapshot"}))
        await await_until(
            lambda: (
                all(len(page.of_type("snapshot")) >= 2 for page in pages)
                and all(len(page.of_type("snapshot")) >= 2 for page in late)
            ),
            "a snapshot asked for during the outage",
        )
        everyone = [*pages, *late]
        assert [page.closed_with for page in everyone] == [None] * len(everyone)
        assert [len(page.of_type("paused")) for page in everyone] == [1] * len(everyone)
        outage_s = time.monotonic() - down_at

        back_at = time.monotonic()
        await asyncio.to_thread(own_redis.start)
        await await_until(
            lambda: all(page.first_at("resumed", back_at) for page in everyone),
            "every page resumed",
        )
        # The resumed frame is followed by a fresh snapshot.
        await await_until(
            lambda: all(page.first_at("snapshot", back_at) for page in everyone),
            "a fresh snapshot on every page",
        )
        resync = [page.first_at("snapshot", back_at) for page in everyone]
        delays = [at - back_at for at in resync if at is not None]
        print(
            f"outage {outage_s:.1f} s; resync after Redis returned: "
            f"min {min(delays):.2f} s, max {max(delays):.2f} s"
        )
        assert max(delays) < RESYNC_BOUND_S
        # Group membership came back with Redis (it started empty): a broadcast
        # reaches every page again.
        sent_at = time.monotonic()
        assert await lab_broadcast(port) == 202
        await await_until(
            lambda: all(page.first_at("update", sent_at) for page in everyone),
            "an update after the outage",
        )
        assert [page.closed_with for page in everyone] == [None] * len(everyone)
        for page in everyone:
            await page.socket.close()
            with contextlib.suppress(Exception):
                await page.reader

    asyncio.run(scenario())
