"""Asyncio Redis connections that never lose a task's cancellation.

On Python 3.11, ``asyncio.wait_for`` returns the inner result when the inner
awaitable finishes in the same loop step in which the outer task is cancelled: the
``CancelledError`` is dropped (CPython gh-86296, fixed by 3.12's rewrite of
``wait_for``). redis-py wraps every write in ``wait_for`` when the connection has a
``socket_timeout``, and a write to a healthy socket finishes at once, so a cancel
that lands during a command's write is lost about one time in ten.

For a request-response command the task merely finishes its work late. For a loop it
is a leak: channels-redis's ``receive`` repeats a 5 s blocking pop until a message
comes, so a consumer whose cancel was lost (the socket closed, daphne cancelled the
application) polls Redis for ever, and the test or the server waiting for it hangs.

The connections here notice the loss: a cancel request that arrived during the
write (``Task.cancelling()`` grew) but was not raised is raised after it. The
command was sent and its reply will not be read, so the connection is dropped
first, exactly as redis-py does when a cancel interrupts a write.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)


class _KeepsCancellation(AbstractConnection):
    async def send_packed_command(
        self, command: Any, check_health: bool = True
    ) -> None:
        task = asyncio.current_task()
        requested = task.cancelling() if task is not None else 0
        await super().send_packed_command(command, check_health)
        if task is not None and task.cancelling() > requested:
            await self.disconnect(nowait=True)
            raise asyncio.CancelledError


class TcpConnection(_KeepsCancellation, Connection):
    pass


class SslConnection(_KeepsCancellation, SSLConnection):
    pass


class UnixConnection(_KeepsCancellation, UnixDomainSocketConnection):
    pass


def connection_options(url: str, **options: Any) -> dict[str, Any]:
    """Return ``ConnectionPool`` keyword arguments for ``url`` and ``options``.

    ``ConnectionPool.from_url`` would not do: for ``unix://`` and ``rediss://`` URLs
    the URL's own connection class overrides the one passed in.
    """
    parsed = parse_url(url)
    if parsed.get("connection_class") is UnixDomainSocketConnection:
        kept: type[AbstractConnection] = UnixConnection
    elif parsed.get("connection_class") is SSLConnection:
        kept = SslConnection
    else:
        kept = TcpConnection
    return {**parsed, **options, "connection_class": kept}


def async_redis(url: str, **options: Any) -> redis.asyncio.Redis:
    """Return an asyncio client of ``url`` whose connections keep cancellations."""
    pool = redis.asyncio.ConnectionPool(**connection_options(url, **options))
    return redis.asyncio.Redis.from_pool(pool)
