"""Presence through the real ASGI application and real Redis, in one process.

The late joiner's snapshot carries the count, a named tab hears changes, a session
is counted once however many sockets it opens (and sockets without one once per
address), stale sockets are dropped by score, a burst of joins costs about one
broadcast a second, and a Redis that does not answer leaves the socket open with the
count unknown.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore

from config.asgi import application
from config.processes import free_port
from library.models import Book, Branch
from realtime.presence import (
    BROADCAST_INTERVAL_MS,
    Viewer,
    broadcasts_key,
    presence_count,
    presence_join,
    sockets_key,
    ttl_s,
    viewers_key,
)
from tests.asgi import Socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]
ORIGIN = (b"origin", b"http://127.0.0.1")


@pytest.fixture
def branch(redis_client):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=2)
    return branch


def _stored_session() -> str:
    session = SessionStore()
    session["live_viewer"] = True
    session.create()
    assert session.session_key is not None
    return session.session_key


async def new_session() -> str:
    """Return the key of a new stored session (a visitor of the live page)."""
    return await sync_to_async(_stored_session)()


async def open_socket(
    tab: str | None = None, session: str | None = None
) -> tuple[Socket, dict[str, Any]]:
    path = "/ws/branches/1/stock/" + (f"?tab={tab}" if tab is not None else "")
    headers = [ORIGIN]
    if session is not None:
        headers.append(
            (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session}".encode())
        )
    ws = Socket(application, path, headers=headers)
    connected, _ = await ws.connect()
    assert connected
    snapshot = await ws.receive_json_from()
    assert snapshot["type"] == "snapshot"
    return ws, snapshot


async def presence_reaches(ws: Socket, watching: int) -> None:
    """Read frames until a presence frame says ``watching`` (the deadline fails it)."""
    async with asyncio.timeout(10):
        while True:
            frame = await ws.receive_json_from(timeout=10)
            if frame["type"] == "presence" and frame["watching"] == watching:
                return


def broadcasts(redis_client) -> int:
    return int(redis_client.get(broadcasts_key(1)) or 0)


async def test_a_late_joiner_gets_the_count_in_its_first_frame(branch):
    first, snapshot = await open_socket("tab-first-0001", await new_session())
    assert snapshot["watching"] == 1
    second, snapshot = await open_socket("tab-second-002", await new_session())
    assert snapshot["watching"] == 2
    await presence_reaches(first, 2)
    await second.disconnect()
    await presence_reaches(first, 1)
    await first.disconnect()
    assert await presence_count(1) == 0


async def test_a_joiner_is_not_told_again_what_its_snapshot_said(branch):
    ws, snapshot = await open_socket("tab-alone-0001")
    assert snapshot["watching"] == 1
    # Its own join's broadcast (claimed at once: nothing was sent before) says 1.
    assert await ws.receive_nothing(timeout=BROADCAST_INTERVAL_MS / 1000 + 0.5)
    await ws.disconnect()


async def test_a_session_counts_once_however_many_sockets_it_opens(branch):
    visitor = await new_session()
    # A reconnect that reaches the server before the old socket's goodbye, and a
    # second tab of the same browser.
    old, _ = await open_socket("tab-reconnect-1", visitor)
    new, snapshot = await open_socket("tab-reconnect-1", visitor)
    assert snapshot["watching"] == 1
    other_tab, snapshot = await open_socket("tab-other-0001", visitor)
    assert snapshot["watching"] == 1
    # Without a session: counted by address, however many sockets.
    plain = [(await open_socket())[0] for _ in range(3)]
    watcher, snapshot = await open_socket("tab-watcher-01")
    assert snapshot["watching"] == 2
    # A made-up session key is no session: still the address.
    forged, snapshot = await open_socket(session="f" * 32)
    assert snapshot["watching"] == 2
    # The viewer stays while any of its sockets does.
    for ws in (old, new, *plain, forged):
        await ws.disconnect()
    assert await presence_count(1) == 2
    await other_tab.disconnect()
    await presence_reaches(watcher, 1)
    await watcher.disconnect()
    assert await presence_count(1) == 0


async def test_a_bad_tab_gets_an_error_frame_and_is_counted_by_connection(branch):
    ws, snapshot = await open_socket("bad;tab")
    assert snapshot["watching"] == 1
    error = await ws.receive_json_from()
    assert error["type"] == "error"
    assert error["code"] == "bad_request"
    assert "tab must be 8 to 64" in error["error"]
    await ws.send_to(text_data=json.dumps({"action": "snapshot"}))
    assert (await ws.receive_json_from())["type"] == "snapshot"  # still usable
    await ws.disconnect()
    assert await presence_count(1) == 0


async def test_members_older_than_the_ttl_are_not_counted(branch, redis_client):
    seconds, micros = redis_client.time()
    now_ms = seconds * 1000 + micros // 1000
    ttl_ms = ttl_s() * 1000
    # Written as a killed instance would leave them: one beat just inside the
    # window, two just outside it (one of them a second socket of a living viewer).
    redis_client.zadd(
        sockets_key(1),
        {
            "addr:alive|s1": now_ms - ttl_ms + 5_000,
            "addr:alive|s2": now_ms - ttl_ms - 1,
            "addr:dead|s3": now_ms - ttl_ms - 1,
        },
    )
    redis_client.hset(viewers_key(1), mapping={"addr:alive": 2, "addr:dead": 1})
    assert await presence_count(1) == 1
    assert redis_client.zrange(sockets_key(1), 0, -1) == [b"addr:alive|s1"]
    assert redis_client.hgetall(viewers_key(1)) == {b"addr:alive": b"1"}


async def test_a_burst_of_joins_costs_about_one_broadcast_a_second(
    branch, redis_client
):
    observer, _ = await open_socket("tab-observer-1", await new_session())
    sessions = [await new_session() for _ in range(60)]
    before = broadcasts(redis_client)
    started = time.monotonic()
    crowd = [(await open_socket(session=key))[0] for key in sessions]
    await presence_reaches(observer, 61)
    elapsed = time.monotonic() - started
    sent = broadcasts(redis_client) - before
    # The first join is told at once, then one claim per interval, and one trailing
    # broadcast after the last join.
    assert 1 <= sent <= elapsed / (BROADCAST_INTERVAL_MS / 1000) + 2, (sent, elapsed)
    assert sent < 60 / 4
    for ws in [*crowd, observer]:
        await ws.disconnect()


async def test_redis_down_leaves_the_socket_open_and_the_count_unknown(
    branch, settings, caplog
):
    # A port nothing listens on: presence's connections are refused at once. The
    # channel layer keeps its own Redis, as configured at start-up.
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    caplog.set_level(logging.INFO, logger="realtime")
    ws, snapshot = await open_socket("tab-no-redis-1")
    assert snapshot["watching"] is None
    await ws.send_to(text_data=json.dumps({"action": "snapshot"}))
    again = await ws.receive_json_from()
    assert (again["type"], again["watching"], again["total"]) == ("snapshot", None, 2)
    await ws.disconnect()
    assert all(record.exc_info is None for record in caplog.records)
    assert all(record.levelno < logging.ERROR for record in caplog.records)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one line per outage, not one per call
    assert warnings[0].startswith("presence unavailable (Redis)")


async def test_a_beat_reports_unknown_while_redis_is_down_and_recovers_after(
    branch, settings, redis_client
):
    layer = InMemoryChannelLayer()
    inbox = await layer.new_channel()
    await layer.group_add("branch-1", inbox)
    told: list[int | None] = []

    async def tell(watching: int | None) -> None:
        told.append(watching)

    viewer = Viewer(branch_id=1, member="addr:a|beating-1", layer=layer, tell=tell)
    assert await viewer.join() == 1
    joined = await asyncio.wait_for(layer.receive(inbox), 5)
    assert (joined["type"], joined["watching"]) == ("presence.update", 1)

    good_url = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    await viewer.beat()
    assert (told, viewer.watching) == ([None], None)

    settings.REDIS_URL = good_url
    await presence_join(1, "addr:b|another-1")  # someone arrived during the outage
    await viewer.beat()  # the beat finds 2, not the None its socket was told
    event = await asyncio.wait_for(layer.receive(inbox), 5)
    assert (event["type"], event["watching"]) == ("presence.update", 2)
    assert viewer.apply(event) is True
    assert viewer.watching == 2
    await viewer.leave()
    assert await presence_count(1) == 1
