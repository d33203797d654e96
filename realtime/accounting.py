"""Broadcast accounting: what was sent to a group, what reached a socket, who listens.

Counting only; the sending is ``realtime.broadcast``.

Two Redis hashes, one field per group, shared by every process on the database:

- ``realtime:broadcasts`` counts group messages sent (``broadcasts_record``, called
  by ``realtime.broadcast.broadcasts_send``, which the outbox's ``broadcast_flush``
  uses);
- ``realtime:deliveries`` counts frames written to sockets for a group: by the
  fan-out, once per broadcast and process (``deliveries_add``), and by a consumer
  for a group message of the channel layer (``delivery_record``).

Their ratio is the fan-out actually achieved: a broadcast that reached nobody (no
member, or members on an instance the layer does not reach) shows as a broadcast
with no delivery, the failure the lesson warns produces no error.

``group_size`` reads a group's membership where the layer keeps it: channels_redis
stores each group as a sorted set ``<prefix>:group:<name>``; the in-process layer
keeps a dict in this process. A consumer that forgets ``group_discard`` leaves its
channel name in that set until ``group_expiry`` (a day), which is the leak the
tests look for.

Counting never breaks what it counts: a Redis error is logged and the message or
the frame goes out all the same.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterable
from functools import cache
from typing import Any, Final

import redis
import redis.asyncio as aioredis
from django.conf import settings

from config.redis_async import async_redis
from realtime.batching import LoopCounters

log = logging.getLogger("realtime")

BROADCASTS_KEY: Final = "realtime:broadcasts"
DELIVERIES_KEY: Final = "realtime:deliveries"

_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = (
    weakref.WeakKeyDictionary()
)


@cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def redis_client() -> redis.Redis:
    """Return this process's client of the project's Redis database."""
    return _client(settings.REDIS_URL)


def _async_client() -> aioredis.Redis:
    # One client per event loop: a pooled connection belongs to the loop that made it.
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        client = async_redis(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
        _async_clients[loop] = client
    return client


def broadcasts_record(groups: Iterable[str]) -> None:
    """Count one broadcast per entry of ``groups``, in one round trip."""
    groups = list(groups)
    if not groups:
        return
    try:
        with redis_client().pipeline(transaction=False) as pipe:
            for group in groups:
                pipe.hincrby(BROADCASTS_KEY, group, 1)
            pipe.execute()
    except redis.RedisError as error:
        log.warning("broadcast counters not updated (%d sends): %s", len(groups), error)


def _hincrby(pipe: Any, group: str, amount: int) -> None:
    pipe.hincrby(DELIVERIES_KEY, group, amount)


# The frames of one broadcast reach a process's sockets together: one write for all.
_deliveries = LoopCounters("delivery counters", _async_client, _hincrby)


async def delivery_record(group: str) -> None:
    """Count one frame written to a socket for a message of ``group``.

    Batched per event loop (``realtime.batching``): the frames one broadcast puts on
    a process's sockets cost one pipelined write, not one Redis call each.
    """
    await _deliveries.add({group: 1})


def deliveries_add(amounts: dict[str, int]) -> None:
    """Count ``amounts`` frames written per group, without waiting for the write.

    Call on a running event loop: the fan-out's reader (``realtime.fanout``) counts
    a broadcast's frames once for all the process's sockets and goes on.
    """
    _deliveries.add_nowait(amounts)


def counters_read(groups: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
    """Return ``{group: {"broadcasts": n, "deliveries": m}}`` (every group if None)."""
    client = redis_client()
    with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(BROADCASTS_KEY)
        pipe.hgetall(DELIVERIES_KEY)
        sent, delivered = pipe.execute()
    sent = {k.decode(): int(v) for k, v in sent.items()}
    delivered = {k.decode(): int(v) for k, v in delivered.items()}
    names = sorted(set(sent) | set(delivered)) if groups is None else list(groups)
    return {
        name: {"broadcasts": sent.get(name, 0), "deliveries": delivered.get(name, 0)}
        for name in names
    }


def group_key(group: str) -> str:
    """Return the Redis key under which channels_redis keeps ``group``'s members."""
    layer: dict[str, Any] = settings.CHANNEL_LAYERS["default"]
    prefix = layer.get("CONFIG", {}).get("prefix", "asgi")
    return f"{prefix}:group:{group}"


def group_size(group: str, layer: Any = None) -> int:
    """Return how many channels are members of ``group`` on the configured layer.

    For the in-process layer pass the process's ``layer``; without one, the Redis
    layer's sorted set is read.
    """
    groups = getattr(layer, "groups", None)
    if isinstance(groups, dict):
        return len(groups.get(group, {}))
    return int(redis_client().zcard(group_key(group)))
