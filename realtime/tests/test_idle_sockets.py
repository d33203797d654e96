"""Idle live shelf sockets survive on a real daphne with the Redis channel layer.

channels-redis waits for a consumer's next message with a 5 s blocking pop; redis-py's
default 5 s socket read timeout used to fire at the same moment, killing the
consumer with ``TimeoutError: Timeout reading from …`` (config.settings
CHANNEL_LAYERS). Sockets held idle for over a minute must still get a broadcast.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.typing import Origin

from config.processes import ROOT, child_environment, free_port, stop, wait_listening
from library.models import Book, Branch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

SOCKETS = 5
# Longer than a minute: a dozen rounds of the layer's 5 s blocking pop per socket.
IDLE_S = 65.0


@pytest.fixture
def library(redis_client) -> Branch:
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=3)
    return branch


@pytest.fixture
def daphne(library, tmp_path: Path):
    """A daphne with lab routes on (the broadcast route); yield (port, stderr path)."""
    port = free_port()
    stderr_path = tmp_path / "daphne.stderr"
    # tests.processes.start_daphne discards stderr; this test reads it.
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)),
                "config.asgi:application",
            ],
            cwd=ROOT,
            env={**child_environment(), "LIBRARY_LAB_ROUTES": "on"},
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_listening(port, process)
        yield port, stderr_path
    finally:
        stop(process)


async def _first_frame(socket: websockets.ClientConnection) -> dict[str, object]:
    return dict(json.loads(await socket.recv()))


def test_idle_sockets_outlive_the_redis_read_timeout_and_get_a_broadcast(daphne):
    port, stderr_path = daphne

    async def scenario() -> list[dict[str, object]]:
        sockets = [
            await websockets.connect(
                f"ws://127.0.0.1:{port}/ws/branches/1/stock/",
                origin=Origin(f"http://127.0.0.1:{port}"),
                ping_interval=None,  # idle from this side; daphne's pings are answered
            )
            for _ in range(SOCKETS)
        ]
        frames: list[asyncio.Task[dict[str, object]]] = []
        try:
            for socket in sockets:
                assert json.loads(await socket.recv())["type"] == "snapshot"
            # One receive per socket, left running: a frame or a close during the
            # idle minute ends it early. (A cancelled recv() may drop the next frame,
            # so the same receive then waits for the broadcast.)
            frames = [asyncio.create_task(_first_frame(socket)) for socket in sockets]
            early, _ = await asyncio.wait(frames, timeout=IDLE_S)
            assert not early, [task.exception() or task.result() for task in early]
            async with httpx.AsyncClient() as client:
                sent = await client.post(f"http://127.0.0.1:{port}/_lab/broadcast/1/")
            assert sent.status_code == 202, sent.text[:300]
            return list(await asyncio.wait_for(asyncio.gather(*frames), 10))
        finally:
            for socket in sockets:
                await socket.close()
            await asyncio.gather(*frames, return_exceptions=True)

    updates = asyncio.run(scenario())
    assert [(u["type"], u["book"], u["on_shelf"]) for u in updates] == [
        ("update", 1, 3)
    ] * SOCKETS
    stderr = stderr_path.read_text(errors="replace")
    assert "Timeout reading" not in stderr, stderr[-3000:]
