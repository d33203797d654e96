"""One client's share of a daphne's live-shelf sockets, and who presence counts.

A review opened 1,000 sockets from one client: all were accepted and the page said
1,002 people were watching. Here a real daphne with the default shares gets more
sockets than one address may hold: the one past the share is closed with 4429, and
the viewers are the sessions (and the one cookie-less address), not the sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator

import pytest
import websockets
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore
from websockets.typing import Origin

from config.processes import (
    await_until,
    child_environment,
    free_port,
    start_daphne,
    stop,
)
from library.models import Book, Branch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


@pytest.fixture
def daphne(transactional_db: None, redis_client: object) -> Iterator[int]:
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=3)
    port = free_port()
    # The shipped defaults: nothing in the environment names the shares.
    env = {
        name: value
        for name, value in child_environment().items()
        if not name.startswith(("REALTIME_SOCKETS_", "REALTIME_STREAMS_"))
    }
    server = start_daphne(port, env=env)
    try:
        yield port
    finally:
        stop(server)


def session_cookie() -> str:
    """Return the cookie of a new stored (anonymous) session."""
    session = SessionStore()
    session["live_viewer"] = True
    session.create()
    assert session.session_key is not None
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


class Live:
    """A live shelf socket: its frames as they come, and how it was closed."""

    def __init__(self, socket: websockets.ClientConnection) -> None:
        self.socket = socket
        self.frames: list[dict[str, object]] = []
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in self.socket:
                self.frames.append(json.loads(raw))

    @property
    def closed_with(self) -> int | None:
        return self.socket.close_code if self.reader.done() else None

    def watching(self) -> object:
        told = [
            f["watching"] for f in self.frames if f["type"] in ("snapshot", "presence")
        ]
        return told[-1] if told else None

    async def close(self) -> None:
        await self.socket.close()
        await self.reader


async def live(port: int, tab: int, cookie: str | None = None) -> Live:
    socket = await websockets.connect(
        f"ws://127.0.0.1:{port}/ws/branches/1/stock/?tab=shares-tab-{tab:04d}",
        origin=Origin(f"http://127.0.0.1:{port}"),
        additional_headers={"Cookie": cookie} if cookie else None,
    )
    return Live(socket)


async def settled(page: Live) -> Live:
    """Wait until ``page`` has its snapshot or has been closed."""
    await await_until(
        lambda: page.frames or page.closed_with is not None, "a snapshot or a close"
    )
    return page


def test_one_client_holds_its_share_of_sockets_and_counts_as_its_sessions(
    daphne: int,
) -> None:
    port = daphne
    per_session = settings.REALTIME_SOCKETS_PER_SESSION
    per_client = settings.REALTIME_SOCKETS_PER_CLIENT
    alice, bob = session_cookie(), session_cookie()

    async def scenario() -> None:
        # One session's tabs, one more than its share.
        tabs = [
            await settled(await live(port, n, alice)) for n in range(per_session + 1)
        ]
        assert [t.closed_with for t in tabs] == [None] * per_session + [4429]
        others = [await settled(await live(port, 100, bob))]
        # Cookie-less sockets from the same address fill the address's share.
        crowd: list[Live] = []
        while len(tabs) - 1 + len(others) + len(crowd) < per_client:
            crowd.append(await live(port, 200 + len(crowd)))
        for page in crowd:
            await settled(page)
        refused = await settled(await live(port, 999))
        assert refused.closed_with == 4429
        assert all(page.closed_with is None for page in crowd)
        held = [*tabs[:per_session], *others, *crowd]
        # Three viewers: Alice, Bob and the address without a session.
        await await_until(
            lambda: all(page.watching() == 3 for page in held),
            "every page told three are watching",
        )
        # A place given back is taken again.
        await tabs[0].close()
        again = await settled(await live(port, 998, alice))
        assert again.closed_with is None
        for page in [*held[1:], again]:
            await page.close()

    asyncio.run(scenario())
