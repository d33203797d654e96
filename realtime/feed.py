"""A live socket's feed of channel-layer messages, kept through a Redis outage.

channels reads a consumer's channel with ``channel_layer.receive``. With the Redis
layer that call raises the moment Redis goes away, channels lets the error end the
consumer, and daphne closes the socket with 1011: every live page of the process at
once, and each reconnect again (its ``group_add`` raised in the handshake: HTTP 500)
for as long as Redis stays down. Yet the page still works without Redis: snapshots
come from the database. Only the push of changes is lost.

``LiveFeed`` stands in for the consumer's channel receive. When the layer fails it
hands the consumer one ``live.paused`` message instead of the error (the consumer
tells its page), then waits until Redis answers again, joins the consumer's group
again (a restarted Redis may have lost it) and hands over ``live.resumed`` (the
consumer sends a fresh snapshot: whatever changed meanwhile). Only after a
successful join does it read the channel again, so a socket never listens on a
channel its group no longer sends to.

Waiting for Redis costs one probe per process (``_LayerWatch``), not one per socket:
a thousand paused pages share one PING every ``PROBE_INTERVAL_S``. When it answers,
each page rejoins after a random delay of up to ``RESUME_SPREAD_S``, so a thousand
snapshots do not reach the database in one instant. Detection plus spread keep a
page's resynchronisation within about a second of Redis's return.
"""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final

import redis

log = logging.getLogger("realtime")

# What a Redis that went away raises: redis-py's errors (ConnectionError, TimeoutError)
# and the socket's own, which can surface unwrapped from a half-written command.
LAYER_ERRORS: Final = (redis.RedisError, OSError)
PROBE_INTERVAL_S: Final = 0.5
RESUME_SPREAD_S: Final = 0.5
PAUSED: Final = "live.paused"
RESUMED: Final = "live.resumed"

Message = dict[str, Any]
Probe = Callable[[], Awaitable[object]]


async def layer_ping(layer: Any) -> None:
    """Raise unless every Redis host of the channel layer answers PING."""
    # channels_redis keeps one client per host and event loop (``connection``);
    # a layer without hosts (the in-process one) has nothing to lose.
    for index in range(getattr(layer, "ring_size", 0)):
        await layer.connection(index).ping()


class _LayerWatch:
    """Whether a layer's Redis answers, as one probe per event loop sees it."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.up = asyncio.Event()
        self.up.set()
        self._prober: asyncio.Task[None] | None = None

    def lost(self, error: BaseException) -> None:
        if self.up.is_set():
            log.warning("live feeds paused: channel layer unavailable (%s)", error)
        self.up.clear()

    async def back(self) -> None:
        """Return once the layer's Redis has answered since it was last lost."""
        if not self.up.is_set() and (self._prober is None or self._prober.done()):
            self._prober = asyncio.create_task(
                self._probe_until_up(), name="live-feed-probe"
            )
        await self.up.wait()

    async def _probe_until_up(self) -> None:
        while not self.up.is_set():
            try:
                await self.probe()
            except LAYER_ERRORS:
                await asyncio.sleep(PROBE_INTERVAL_S)
                continue
            log.info("live feeds resuming: channel layer available again")
            self.up.set()


# Per event loop (a probe's connections belong to its loop) and per layer: the
# layer is kept beside its watch, so an id reused by a later layer is not mistaken.
_watches: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[int, tuple[Any, _LayerWatch]]
] = weakref.WeakKeyDictionary()


def layer_watch(layer: Any) -> _LayerWatch:
    """Return this event loop's watch of ``layer``'s Redis."""
    per_loop = _watches.setdefault(asyncio.get_running_loop(), {})
    found = per_loop.get(id(layer))
    if found is None or found[0] is not layer:
        found = per_loop[id(layer)] = (layer, _LayerWatch(lambda: layer_ping(layer)))
    return found[1]


class LiveFeed:
    """A consumer's channel receive that pauses, rather than fails, without Redis.

    ``receive`` reads the consumer's channel (channels' partial of
    ``layer.receive``); ``rejoin`` adds the consumer to its group again. channels
    starts reading before the consumer's ``connect`` has run, so the feed reads
    nothing until ``connect`` says how its own join went: ``joined()`` or
    ``pause()``. A read started earlier could sit on a healthy Redis for ever while
    the join that failed a moment before was never repeated.
    """

    def __init__(
        self,
        receive: Callable[[], Awaitable[Message]],
        rejoin: Callable[[], Awaitable[None]],
        watch: Callable[[], _LayerWatch],
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._receive = receive
        self._rejoin = rejoin
        self._watch = watch
        self._rng = rng or random.Random()
        self._settled = asyncio.Event()
        self.paused = False

    def joined(self) -> None:
        """Start reading: the consumer joined its group."""
        self._settled.set()

    def pause(self, error: BaseException) -> None:
        """Mark the feed paused (the consumer could not join its group)."""
        self.paused = True
        self._watch().lost(error)
        self._settled.set()

    async def __call__(self) -> Message:
        await self._settled.wait()
        if self.paused:
            await self._resume()
            self.paused = False
            return {"type": RESUMED}
        try:
            return await self._receive()
        except LAYER_ERRORS as error:
            self.pause(error)
            return {"type": PAUSED}

    async def _resume(self) -> None:
        while True:
            watch = self._watch()
            await watch.back()
            await asyncio.sleep(self._rng.uniform(0, RESUME_SPREAD_S))
            try:
                await self._rejoin()
            except LAYER_ERRORS as error:
                watch.lost(error)  # gone again: wait for the next return
                continue
            return
