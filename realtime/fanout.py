"""A broadcast reaches a process once and its sockets from there: one subscription
per process and group, one frame per broadcast.

Through the channel layer a group message becomes, in each process, one copy per
member channel: a queue put, a consumer task woken, the event encoded to JSON and
a counter call, per socket. At a thousand sockets that per-socket work, not Redis,
was most of a broadcast's delay (issue 27: p99 2.5-3.5x a raw Redis publish).

Here the sender encodes the socket frame once and ``PUBLISH``es it on the group's
channel (``fanout_publish``). Every process that holds sockets of the group has one
Redis subscription to that channel (``FanOut``, one per event loop and Redis host);
its reader hands the frame to each local socket in turn (``Sink.deliver``, a write
to daphne's transport, no task switch) and counts the frames written once per
broadcast.

What Redis pub/sub does not give, this module adds:

- **Subscribed before the snapshot.** ``FanOut.join`` returns once Redis has
  confirmed the subscription, so a change committed after the consumer reads its
  snapshot is published to a channel this process already hears.
- **Losses are told.** Pub/sub keeps nothing for a subscriber that was away: when
  the subscription's connection fails, the reader reconnects (a probe every
  ``RETRY_S``), subscribes again to every group that still has sockets, and asks
  each socket to ``resync`` (send a fresh snapshot). A connection that stops
  answering is noticed by a ``PING`` after ``PING_S`` of silence.
- **Per host.** With several Redis hosts a group's channel lives on the host the
  channel layer hashes the group to, so both sides agree and one group's frames
  keep their order.

Pub/sub channels are not scoped by Redis database; the channel's name carries the
layer's prefix and the database number, so two deployments (or a test run and a
developer's server) sharing one Redis never hear each other.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import redis
import redis.asyncio as aioredis
from channels_redis.utils import create_pool
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from realtime.accounting import deliveries_add

log = logging.getLogger("realtime")

LAYER_ERRORS: Final = (redis.RedisError, OSError)
PING_S: Final = 5.0
RETRY_S: Final = 0.5
CONFIRM_S: Final = 5.0


class Sink(Protocol):
    """One socket of this process listening to a group."""

    async def deliver(self, frame: str) -> bool:
        """Write ``frame`` to the socket; return whether it was written now."""

    def resync(self) -> None:
        """Frames may have been missed: have the socket send a fresh snapshot."""


def fanout_supported(layer: Any) -> bool:
    """Return whether ``layer`` is a Redis channel layer this module can publish on.

    channels' in-process layer (``LIBRARY_CHANNEL_LAYER=memory``, the broadcast
    lab's) and the tests' stand-ins keep the group send: one process only.
    """
    return (
        callable(getattr(layer, "connection", None))
        and callable(getattr(layer, "consistent_hash", None))
        and isinstance(getattr(layer, "hosts", None), list)
    )


def fanout_channel(layer: Any, group: str) -> str:
    """Return the pub/sub channel of ``group`` on ``layer``'s host for it."""
    host = layer.hosts[layer.consistent_hash(group)]
    db = host.get("db")
    if db is None and "address" in host:
        db = parse_url(host["address"]).get("db")
    return f"{layer.prefix}:{db or 0}:fanout:{group}"


async def fanout_publish(
    layer: Any,
    messages: Sequence[tuple[str, str]],
    *,
    connection: Callable[[int], Any] | None = None,
) -> list[str]:
    """``PUBLISH`` each ``(group, frame)`` in order; return the groups sent.

    One pipeline per Redis host, on ``connection(index)`` (the layer's own
    connection of this event loop by default). A host that fails raises after the
    hosts before it were sent to; their groups are in the error's ``sent`` attribute.
    """
    connect = layer.connection if connection is None else connection
    by_host: dict[int, list[tuple[str, str]]] = collections.defaultdict(list)
    for group, frame in messages:
        by_host[layer.consistent_hash(group)].append((group, frame))
    sent: list[str] = []
    for index, items in by_host.items():
        try:
            async with connect(index).pipeline(transaction=False) as pipe:
                for group, frame in items:
                    pipe.publish(fanout_channel(layer, group), frame)
                await pipe.execute()
        except LAYER_ERRORS as error:
            error.sent = sent  # type: ignore[union-attr]
            raise
        sent += [group for group, _ in items]
    return sent


class _Publisher:
    """This process's event loop for publishing from synchronous code.

    A drain's after-batch step is synchronous; ``async_to_sync`` ran each of its
    publishes on an event loop of its own, and channels-redis keeps connections
    per event loop, so every batch paid a thread, a loop and a new Redis connection.
    This loop runs in a daemon thread for the life of the process, with one client
    per Redis host. A forked child (rq's work-horse) has no such thread: it starts
    its own (``_publisher``).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._clients: dict[str, aioredis.Redis] = {}
        threading.Thread(
            target=self.loop.run_forever, name="fanout-publish", daemon=True
        ).start()

    def client(self, host: dict[str, Any]) -> aioredis.Redis:
        """The client of ``host`` (a channel layer's host entry). On the loop only."""
        key = repr(sorted(host.items()))
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = aioredis.Redis(
                connection_pool=create_pool(host)
            )
        return client


_publisher_now: _Publisher | None = None
_publisher_lock = threading.Lock()
# Longer than any Redis timeout of the layer's hosts, which end a stuck publish
# first; only a loop that stopped would reach it (TimeoutError, an OSError).
PUBLISH_WAIT_S: Final = 60.0


def _publisher() -> _Publisher:
    global _publisher_now
    with _publisher_lock:
        if _publisher_now is None or _publisher_now.pid != os.getpid():
            _publisher_now = _Publisher()
        return _publisher_now


def fanout_publish_sync(layer: Any, messages: Sequence[tuple[str, str]]) -> list[str]:
    """``fanout_publish`` from synchronous code, on this process's publishing loop
    and its kept connections (``_Publisher``). Raises as ``fanout_publish`` does."""
    publisher = _publisher()

    def connection(index: int) -> aioredis.Redis:
        return publisher.client(layer.hosts[index])

    def publish() -> list[str]:
        done = asyncio.run_coroutine_threadsafe(
            fanout_publish(layer, messages, connection=connection), publisher.loop
        )
        return done.result(PUBLISH_WAIT_S)

    try:
        return publish()
    except redis.ConnectionError:
        # A kept connection that Redis dropped (a restart) fails on its first use,
        # and its pool lets it go: one more try dials a new one. A frame that went
        # out before the failure goes out twice; a page ignores a version it has.
        return publish()


class _Session:
    """One subscribed connection: its pub/sub and what Redis has confirmed."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub
        self.confirmed: set[str] = set()
        # Replies of SUBSCRIBE/UNSUBSCRIBE come in the order they were sent; a join
        # waits for the reply of its own SUBSCRIBE, not an earlier one's.
        self.pending: dict[str, collections.deque[asyncio.Future[None] | None]] = (
            collections.defaultdict(collections.deque)
        )
        self.reader: asyncio.Task[None] | None = None

    async def subscribe(self, channel: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending[channel].append(future)
        await self.pubsub.subscribe(channel)
        return future

    async def unsubscribe(self, channel: str) -> None:
        self.confirmed.discard(channel)
        self.pending[channel].append(None)
        await self.pubsub.unsubscribe(channel)

    def replied(self, kind: str, channel: str) -> None:
        queue = self.pending.get(channel)
        future = queue.popleft() if queue else None
        if kind == "subscribe":
            self.confirmed.add(channel)
        else:
            self.confirmed.discard(channel)
        if future is not None and not future.done():
            future.set_result(None)

    def fail(self, error: BaseException) -> None:
        for queue in self.pending.values():
            for future in queue:
                if future is not None and not future.done():
                    future.set_exception(error)
        self.pending.clear()
        self.confirmed.clear()


class FanOut:
    """This event loop's subscriptions on one Redis host, and the sockets behind them.

    ``client`` builds a client of the host with no retries of its own: a failed
    connection must end the session, so the sockets learn they may have missed a
    frame.
    """

    def __init__(self, client: Callable[[], aioredis.Redis]) -> None:
        self._client = client
        self._sinks: dict[str, dict[Sink, str]] = {}  # channel -> {sink: group}
        self._session: _Session | None = None
        self._opening: asyncio.Task[_Session] | None = None
        self._recovery: asyncio.Task[None] | None = None

    def sockets(self, channel: str) -> int:
        return len(self._sinks.get(channel, ()))

    async def join(self, channel: str, group: str, sink: Sink) -> None:
        """Add ``sink``; return once Redis confirmed the channel's subscription.

        Raises a Redis or socket error (the sink is then not added) when Redis does
        not answer: the caller pauses its page and joins again later.
        """
        sinks = self._sinks.setdefault(channel, {})
        sinks[sink] = group
        try:
            session = await self._open()
            if channel not in session.confirmed:
                # A SUBSCRIBE on its way is waited for; after an UNSUBSCRIBE on
                # its way (the last socket just left) a new one is sent.
                queue = session.pending.get(channel)
                future = queue[-1] if queue else None
                if future is None:
                    future = await session.subscribe(channel)
                await asyncio.wait_for(asyncio.shield(future), CONFIRM_S)
        except BaseException:
            # Redis errors, and an unconfirmed subscription's TimeoutError (an
            # OSError, so the callers' LAYER_ERRORS take it as Redis away).
            self._drop(channel, sink)
            raise

    async def leave(self, channel: str, sink: Sink) -> None:
        """Remove ``sink``; unsubscribe once the channel has no socket left here."""
        if self._drop(channel, sink) and self._session is not None:
            with contextlib.suppress(*LAYER_ERRORS):
                await self._session.unsubscribe(channel)

    def _drop(self, channel: str, sink: Sink) -> bool:
        """Forget ``sink``; return whether its channel has no socket left."""
        sinks = self._sinks.get(channel)
        if sinks is None:
            return False
        sinks.pop(sink, None)
        if sinks:
            return False
        del self._sinks[channel]
        return True

    async def _open(self) -> _Session:
        if self._session is not None:
            return self._session
        if self._opening is None or self._opening.done():
            self._opening = asyncio.create_task(self._connect(), name="fanout-open")
        # shield: one joiner's cancellation must not cancel the others' session.
        return await asyncio.shield(self._opening)

    async def _connect(self) -> _Session:
        pubsub = self._client().pubsub()
        session = _Session(pubsub)
        try:
            await pubsub.connect()  # type: ignore[no-untyped-call]
            channels = list(self._sinks)
            for channel in channels:
                await session.subscribe(channel)
        except BaseException:
            await _close(pubsub)
            raise
        session.reader = asyncio.create_task(self._read(session), name="fanout-read")
        self._session = session
        return session

    async def _read(self, session: _Session) -> None:
        """Deliver every frame until the connection fails, then recover."""
        heard = time.monotonic()
        try:
            while True:
                message = await session.pubsub.get_message(timeout=PING_S)
                if message is None:
                    if time.monotonic() - heard > 3 * PING_S:
                        raise redis.TimeoutError("no answer to PING")
                    await session.pubsub.ping()
                    continue
                heard = time.monotonic()
                kind = message["type"]
                channel = _text(message["channel"])
                if kind == "message":
                    await self._fan_out(channel, _text(message["data"]))
                elif kind in ("subscribe", "unsubscribe"):
                    session.replied(kind, channel)
        except LAYER_ERRORS as error:
            log.warning("broadcast subscription lost: %s", error)
            self._lose(session, error)
        except asyncio.CancelledError:
            self._lose(session, redis.ConnectionError("fan-out reader cancelled"))
            raise

    async def _fan_out(self, channel: str, frame: str) -> None:
        sinks = self._sinks.get(channel)
        if not sinks:
            return
        written: dict[str, int] = {}
        # A copy: a socket that closes while the frame goes out leaves the dict.
        for sink, group in list(sinks.items()):
            try:
                if await sink.deliver(frame):
                    written[group] = written.get(group, 0) + 1
            except Exception:
                log.exception("a broadcast frame could not be written to a socket")
        if written:
            # Not awaited: the count is written in the background, one pipelined
            # write per loop, while this reader takes the next frame.
            deliveries_add(written)

    def _lose(self, session: _Session, error: BaseException) -> None:
        if self._session is session:
            self._session = None
        session.fail(error)
        asyncio.get_running_loop().create_task(_close(session.pubsub))
        if self._sinks and (self._recovery is None or self._recovery.done()):
            self._recovery = asyncio.get_running_loop().create_task(
                self._recover(), name="fanout-recover"
            )

    async def _recover(self) -> None:
        """Subscribe again once Redis answers; tell every socket to resync."""
        while self._sinks:
            await asyncio.sleep(RETRY_S)
            try:
                session = await self._open()
                await asyncio.wait_for(
                    asyncio.gather(
                        *(
                            asyncio.shield(f)
                            for q in session.pending.values()
                            for f in q
                            if f is not None
                        )
                    ),
                    CONFIRM_S,
                )
            except LAYER_ERRORS:  # TimeoutError included: it is an OSError
                continue
            log.info("broadcast subscription back: %d groups", len(self._sinks))
            for sinks in list(self._sinks.values()):
                for sink in list(sinks):
                    sink.resync()
            return


async def _close(pubsub: Any) -> None:
    with contextlib.suppress(*LAYER_ERRORS, RuntimeError):
        await pubsub.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# Per event loop (a connection belongs to its loop), per layer and Redis host.
_fanouts: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[int, int], tuple[Any, FanOut]]
] = weakref.WeakKeyDictionary()


def fanout_for(layer: Any, group: str) -> tuple[FanOut, str]:
    """Return this event loop's ``FanOut`` for ``group``'s host, and its channel."""
    index = layer.consistent_hash(group)
    per_loop = _fanouts.setdefault(asyncio.get_running_loop(), {})
    found = per_loop.get((id(layer), index))
    if found is None or found[0] is not layer:
        host = dict(layer.hosts[index])
        found = per_loop[(id(layer), index)] = (
            layer,
            FanOut(lambda: _subscriber_client(host)),
        )
    return found[1], fanout_channel(layer, group)


def subscriber_name() -> str:
    """Return the Redis client name of this process's fan-out subscriptions."""
    return f"fanout-{os.getpid()}"


def _subscriber_client(host: dict[str, Any]) -> aioredis.Redis:
    # No retries: redis-py would otherwise reconnect and subscribe again by
    # itself, and the frames lost meanwhile would go unnoticed. No read timeout:
    # the reader's own PING watches an idle connection.
    # Named for its process, so an operator (or a test) can find it in CLIENT LIST.
    options = {
        **host,
        "socket_timeout": None,
        "retry": Retry(NoBackoff(), 0),
        "client_name": subscriber_name(),
    }
    return aioredis.Redis(connection_pool=create_pool(options))
