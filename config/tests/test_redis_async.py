"""Asyncio Redis connections that keep a task's cancellation (config.redis_async).

Each test cancels a command after every possible number of loop steps, so the
one step where Python 3.11's ``wait_for`` drops the cancel is always among them.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
import redis.asyncio
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from config.redis_async import (
    SslConnection,
    TcpConnection,
    UnixConnection,
    async_redis,
    connection_options,
)

STEPS = range(12)  # a PING's write and reply take fewer loop steps than this


async def cancel_after(awaitable, steps: int) -> bool:
    """Cancel ``awaitable``'s task after ``steps`` loop steps; True if it was raised."""
    task = asyncio.ensure_future(awaitable)
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=30)
    assert done, "the task outlived its cancellation by 30 s"
    return task.cancelled()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for fixed in 3.12")
async def test_plain_redis_py_loses_a_cancel_during_a_write(redis_client):
    # The premise: without config.redis_async one of the steps drops the cancel,
    # and the cancelled PING simply returns True.
    client = redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    kept = [await cancel_after(client.ping(), steps) for steps in STEPS]
    await client.aclose()
    assert not all(kept)


async def test_every_cancel_is_raised(redis_client):
    client = async_redis(settings.REDIS_URL, socket_timeout=5)
    kept = [await cancel_after(client.ping(), steps) for steps in STEPS]
    assert await client.ping()  # a dropped connection is replaced, not broken
    await client.aclose()
    assert all(kept), kept


async def test_a_cancelled_channel_receive_ends(redis_client):
    # The leak this module exists for: a receive whose cancel is lost polls for ever.
    options = connection_options(settings.REDIS_URL, socket_timeout=15)
    for steps in STEPS:
        layer = RedisChannelLayer(hosts=[options])
        channel = await layer.new_channel()
        assert await cancel_after(layer.receive(channel), steps)


def test_the_connection_class_follows_the_url_scheme():
    assert connection_options("redis://h:1/2")["connection_class"] is TcpConnection
    assert connection_options("rediss://h:1/2")["connection_class"] is SslConnection
    unix = connection_options("unix:///run/r.sock?db=3", socket_timeout=4)
    assert unix["connection_class"] is UnixConnection
    assert (unix["path"], unix["db"], unix["socket_timeout"]) == ("/run/r.sock", 3, 4)
