"""Presence across two real daphne processes sharing one Redis.

Clients on both instances reach the same exact count, a disconnect lowers it, and
the viewers of an instance killed with SIGKILL (no ``disconnect`` runs) drop out
once their TTL passes. The TTL is shortened to a few seconds for these processes
(``REALTIME_PRESENCE_TTL_S``). Each client is a visitor with a session of its own,
as a browser on the live page is. A browser tab shows the count and follows a
second visitor; a second tab of the same browser is the same viewer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import uuid

import pytest
import websockets
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore
from websockets.typing import Origin

from config.processes import child_environment, free_port, kill, start_daphne, stop
from library.models import Book, Branch
from realtime.presence import broadcasts_key
from tests.browser import needs_chromium

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]
TTL_S = 3
# A member's last beat is at most a third of the TTL old when its server dies.
LONGEST_BEAT_S = TTL_S / 3


@pytest.fixture
def library(transactional_db, redis_client):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=5)
    return branch


@pytest.fixture
def servers(library):
    """Two daphnes with a short presence TTL; yield their processes and ports."""
    env = {**child_environment(), "REALTIME_PRESENCE_TTL_S": str(TTL_S)}
    started: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        for _ in range(2):
            port = free_port()
            started.append((start_daphne(port, env), port))
        yield started
    finally:
        for process, _ in started:
            stop(process)


def visitors(count: int) -> list[str]:
    """Return the session cookies of ``count`` new visitors (stored sessions)."""
    cookies = []
    for _ in range(count):
        session = SessionStore()
        session["live_viewer"] = True
        session.create()
        cookies.append(f"{settings.SESSION_COOKIE_NAME}={session.session_key}")
    return cookies


class Watcher:
    """A visitor's live shelf tab; keeps the newest count it was told."""

    def __init__(self, socket: websockets.ClientConnection) -> None:
        self.socket = socket
        self.watching: int | None = None
        self.changed = asyncio.Condition()
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, port: int, cookie: str) -> Watcher:
        socket = await websockets.connect(
            f"ws://127.0.0.1:{port}/ws/branches/1/stock/?tab={uuid.uuid4().hex}",
            origin=Origin(f"http://127.0.0.1:{port}"),
            additional_headers={"Cookie": cookie},
        )
        return cls(socket)

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in self.socket:
                frame = json.loads(raw)
                if frame["type"] in ("snapshot", "presence"):
                    async with self.changed:
                        self.watching = frame["watching"]
                        self.changed.notify_all()

    async def until(self, watching: int, timeout: float = 20) -> None:
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: self.watching == watching), timeout
            )

    async def close(self) -> None:
        await self.socket.close()
        await self.reader


async def all_reach(watchers: list[Watcher], watching: int) -> None:
    await asyncio.gather(*(w.until(watching) for w in watchers))


def test_clients_on_two_instances_see_the_exact_count_and_a_leave(servers, capsys):
    (_, port_a), (_, port_b) = servers
    people = visitors(5)

    async def scenario() -> None:
        ports = (port_a, port_a, port_b, port_b, port_b)
        watchers = [
            await Watcher.open(port, cookie)
            for port, cookie in zip(ports, people, strict=True)
        ]
        try:
            await all_reach(watchers, 5)
            leaving = watchers.pop(0)  # one on instance A closes its tab
            await leaving.close()
            await all_reach(watchers, 4)
        finally:
            for watcher in watchers:
                await watcher.close()

    asyncio.run(scenario())


def test_viewers_of_a_killed_instance_expire_after_the_ttl(servers, capsys):
    (doomed, port_a), (_, port_b) = servers
    people = visitors(3)

    async def scenario() -> float:
        on_a = [await Watcher.open(port_a, cookie) for cookie in people[:2]]
        on_b = [await Watcher.open(port_b, people[2])]
        try:
            await all_reach([*on_a, *on_b], 3)
            killed = time.monotonic()
            await asyncio.to_thread(kill, doomed)
            await on_b[0].until(1, timeout=TTL_S * 5)
            return time.monotonic() - killed
        finally:
            for watcher in [*on_a, *on_b]:
                await watcher.close()

    gone_after = asyncio.run(scenario())
    # Not sooner than the TTL allows (the beats were at most LONGEST_BEAT_S old):
    # the drop came from expiry by score, since the dead server said nothing.
    assert gone_after >= TTL_S - LONGEST_BEAT_S - 0.2, gone_after
    with capsys.disabled():
        print(f"\n[presence] killed instance's viewers gone after {gone_after:.2f} s")


def test_a_burst_on_two_instances_is_told_in_few_broadcasts(
    servers, redis_client, capsys
):
    (_, port_a), (_, port_b) = servers
    crowd_size = 100
    people = visitors(crowd_size + 1)

    async def scenario() -> tuple[int, float]:
        observer = await Watcher.open(port_a, people[-1])
        await observer.until(1)
        before = int(redis_client.get(broadcasts_key(1)) or 0)
        started = time.monotonic()
        crowd = await asyncio.gather(
            *(
                Watcher.open((port_a, port_b)[i % 2], people[i])
                for i in range(crowd_size)
            )
        )
        try:
            await all_reach([observer, *crowd], crowd_size + 1)
            elapsed = time.monotonic() - started
            return int(redis_client.get(broadcasts_key(1)) or 0) - before, elapsed
        finally:
            for watcher in [observer, *crowd]:
                await watcher.close()

    sent, elapsed = asyncio.run(scenario())
    # One claim a second across both instances, plus the trailing one.
    assert 1 <= sent <= elapsed + 2, (sent, elapsed)
    with capsys.disabled():
        print(
            f"\n[presence] {crowd_size} joins on 2 instances: {sent} broadcasts"
            f" in {elapsed:.2f} s"
        )


def watching_text(page) -> str:
    return page.inner_text("[data-live-watching]")


@pytest.mark.browser
@needs_chromium
def test_the_page_shows_the_count_and_follows_a_second_visitor(servers, browser):
    (_, port_a), (_, port_b) = servers
    one_browser = browser.new_context(viewport={"width": 1280, "height": 800})
    first = one_browser.new_page()
    first.goto(f"http://127.0.0.1:{port_a}/branches/1/live/")
    first.wait_for_function(
        "() => document.querySelector('[data-live-watching]')"
        ".textContent === '1 watching now'"
    )
    region = first.locator("[data-live-presence]")
    assert region.get_attribute("aria-live") == "polite"
    assert region.get_attribute("data-known") == "true"
    # A second tab of the same browser (its session), on the other instance: the
    # same viewer.
    same = one_browser.new_page()
    same.goto(f"http://127.0.0.1:{port_b}/branches/1/live/")
    same.wait_for_function(
        "() => document.querySelector('[data-live-watching]')"
        ".textContent === '1 watching now'"
    )

    other_browser = browser.new_context(viewport={"width": 1280, "height": 800})
    second = other_browser.new_page()  # someone else, served by the other instance
    second.goto(f"http://127.0.0.1:{port_b}/branches/1/live/")
    for tab in (first, same, second):
        tab.wait_for_function(
            "() => document.querySelector('[data-live-watching]')"
            ".textContent === '2 watching now'",
            timeout=15_000,
        )
    other_browser.close()
    first.wait_for_function(
        "() => document.querySelector('[data-live-watching]')"
        ".textContent === '1 watching now'",
        timeout=15_000,
    )
    assert watching_text(first) == "1 watching now"
    one_browser.close()
