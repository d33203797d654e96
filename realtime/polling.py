"""Waiting for a change without holding a database connection per waiter.

Job progress and the outbox log change in other processes (rq workers, other
daphnes), and ``jobs.services._bump`` writes with ``.update()``, which sends no
signal. So a waiter cannot be told; it has to look. ``ChangeHub`` looks on behalf of
every waiter of one event loop (one per daphne process):

- each interval (``REALTIME_POLL_INTERVAL_MS``, 150 ms) while anyone waits, one
  query reads the versions of every watched job, and one reads the log's head;
- a waiter whose job version differs from the one it has, or whose log offset is
  behind the head, is woken with the new value; the others keep sleeping;
- the queries run on a small thread pool of this module (``DB_THREADS``), each
  thread keeping its one connection from call to call, so an idle waiter, long
  poll or event stream, holds no database connection: the cost is one or two tiny
  queries per interval per process, whatever the number of waiters, and at most
  ``DB_THREADS`` connections per process. (Closing after each call, as this did
  first, had a class's worth of open streams open a PostgreSQL connection several
  times a second: a backend started and torn down for each 1 ms query.) Long
  polls and streams are served on the event loop by ``realtime.front``, so a
  waiter holds no thread either; a woken branch stream runs its own replay query.

The counters of requests, empty answers, stream connections and events live in
Redis (``counter_add``/``counters_read``), shared by every process on the database,
so a lab can read what a server did. A Redis failure never fails a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import redis
import redis.asyncio
from django.conf import settings
from django.db import connection
from django.db.models import Max
from django.utils import timezone

from config.connections import read_on_kept_connection
from jobs.models import JobStatus
from jobs.selectors import jobstatus_payload
from messaging.dispatch import LOG_CHANNEL
from messaging.models import OutboxMessage
from realtime.batching import LoopCounters

log = logging.getLogger("realtime")

T = TypeVar("T")

DB_THREADS: Final = 4
COUNTER_PREFIX: Final = "realtime:count:"
COUNTERS: Final = (
    "short_requests",
    "short_empty",
    "long_requests",
    "long_empty",
    "sse_connections",
    "sse_events",
    "sse_resets",
)
# On PostgreSQL an id is drawn at insert and a slow transaction can commit a lower
# id after a higher one is visible; the log is read only up to messages older than
# this, as messaging.services.streams does. SQLite commits one writer at a time.
LOG_GRACE: Final = datetime.timedelta(seconds=1)
# Starts of new log stretches the hub reads before waking their streams.
PREFETCH_STARTS: Final = 4
# How far past the grace a gap-free run of offsets is read in one look.
GAP_FREE_RUN: Final = 1000

_executor = ThreadPoolExecutor(max_workers=DB_THREADS, thread_name_prefix="realtime-db")


def poll_interval_s() -> float:
    return float(getattr(settings, "REALTIME_POLL_INTERVAL_MS", 150)) / 1000


def long_poll_limits_ms() -> tuple[int, int]:
    """Return (default hold, largest hold a client may ask for) in milliseconds."""
    largest = int(getattr(settings, "REALTIME_LONG_POLL_MAX_MS", 30_000))
    default = int(getattr(settings, "REALTIME_LONG_POLL_DEFAULT_MS", 25_000))
    return min(default, largest), largest


# --- reads: one short query each, on a connection its thread keeps -----------------


async def db_call(function: Callable[..., T], *args: Any) -> T:
    """Run a database read on this module's pool, on its thread's connection.

    Not ``sync_to_async(thread_sensitive=True)``: inside a request that would start
    a thread per request, and with it a connection per open stream. A connection
    the server dropped (a restart) is dialled again and the read tried once more
    (``config.connections.read_on_kept_connection``).
    """

    def on_kept_connection() -> T:
        try:
            return read_on_kept_connection(lambda: function(*args))
        finally:
            if connection.in_atomic_block:  # a read left a transaction open
                connection.close()

    return await asyncio.get_running_loop().run_in_executor(
        _executor, on_kept_connection
    )


def db_release() -> None:
    """Close the connections the pool's threads keep (each thread closes its own).

    For whoever must see them gone (a test run dropping its database): every thread
    is held at a barrier until all have one of these calls, so each runs one.
    """
    barrier = threading.Barrier(DB_THREADS)

    def close() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=10)
        connection.close()

    for done in [_executor.submit(close) for _ in range(DB_THREADS)]:
        done.result()


def job_read(job_id: uuid.UUID) -> dict[str, Any] | None:
    """Return the job's payload (``jobstatus_payload``), or None for an unknown id."""
    job = JobStatus.objects.filter(pk=job_id).first()
    return None if job is None else jobstatus_payload(job)


def _job_versions(job_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    rows = JobStatus.objects.filter(pk__in=job_ids).values_list("pk", "version")
    return {pk: int(version) for pk, version in rows}


def log_head() -> int:
    """Return the highest offset of the outbox log that is safe to read (0: empty).

    On PostgreSQL an offset is safe once it is older than the commit grace, or
    when every offset between it and a safe one is visible: with no gap below it,
    no slower transaction can still commit a lower id. So a run of messages without
    gaps goes out at once, and only a gap (a transaction still open, or one rolled
    back) waits for the grace.
    """
    rows = OutboxMessage.objects.all()
    if connection.vendor == "sqlite":
        return rows.aggregate(n=Max("id"))["n"] or 0
    safe: int = (
        rows.filter(created_at__lte=timezone.now() - LOG_GRACE).aggregate(n=Max("id"))[
            "n"
        ]
        or 0
    )
    newer = rows.filter(id__gt=safe).order_by("id").values_list("id", flat=True)
    for offset in newer[:GAP_FREE_RUN]:
        if offset != safe + 1:
            break
        safe = offset
    return safe


def log_newest() -> int:
    """Return the newest offset of the log, readable yet or not (0: empty)."""
    newest: int | None = OutboxMessage.objects.aggregate(n=Max("id"))["n"]
    return newest or 0


def _poll_once(
    job_ids: list[uuid.UUID], want_head: bool
) -> tuple[dict[uuid.UUID, int], int | None, bool]:
    """Job versions, the readable head, and whether newer messages wait behind it."""
    versions = _job_versions(job_ids) if job_ids else {}
    if not want_head:
        return versions, None, False
    head = log_head()
    return versions, head, log_newest() > head


# --- the hub -------------------------------------------------------------------


@dataclass(eq=False)
class _Waiter:
    seen: int
    future: asyncio.Future[int | None]


@dataclass
class HubStats:
    polls: int = 0
    failures: int = 0


@dataclass
class ChangeHub:
    """Watch jobs and the log head for the waiters of one event loop."""

    jobs: dict[uuid.UUID, list[_Waiter]] = field(default_factory=dict)
    # A dict, used as an ordered set: thousands of streams leave at once when the
    # log moves, and removing each from a list would cost the whole list each time.
    log: dict[_Waiter, None] = field(default_factory=dict)
    stats: HubStats = field(default_factory=HubStats)
    _task: asyncio.Task[None] | None = None
    _listener: asyncio.Task[None] | None = None
    # Read a new stretch (after, head] of the log before its waiters are woken
    # (realtime.sse's shared windows set it): thousands of woken streams then find
    # their events ready instead of each waiting once more for the same read.
    prefetch: Callable[[int, int], Awaitable[object]] | None = None
    _woken: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def waiting(self) -> int:
        return sum(len(waiters) for waiters in self.jobs.values()) + len(self.log)

    async def job_changed(
        self, job_id: uuid.UUID, seen: int, timeout: float
    ) -> int | bool | None:
        """Wait until the job's version differs from ``seen``.

        Return the new version, None when the job is gone, False on timeout.
        """
        waiter = _Waiter(seen, asyncio.get_running_loop().create_future())
        self.jobs.setdefault(job_id, []).append(waiter)
        self._start()
        try:
            return await asyncio.wait_for(waiter.future, timeout)
        except TimeoutError:
            return False
        finally:
            waiters = self.jobs.get(job_id, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self.jobs.pop(job_id, None)

    async def log_moved(self, after: int, timeout: float) -> int | None:
        """Wait until the log's head passes ``after``; return it, or None on timeout."""
        waiter = _Waiter(after, asyncio.get_running_loop().create_future())
        self.log[waiter] = None
        self._start()
        try:
            return await asyncio.wait_for(waiter.future, timeout)
        except TimeoutError:
            return None
        finally:
            self.log.pop(waiter, None)

    def _start(self) -> None:
        if self.log:
            self._start_listener()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def _start_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        """Wake the poll when a commit announces new outbox messages (a hint only).

        One subscription per process, while log waiters exist. Its connection has
        no read timeout: an idle subscription is the normal case, and
        ``get_message``'s own timeout lets the loop see when nobody waits any more.
        """
        while self.log:
            client = redis.asyncio.Redis.from_url(
                settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=None
            )
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(LOG_CHANNEL)
                while self.log:
                    told = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=1.0
                    )
                    if told is not None:
                        self._woken.set()
            except (redis.RedisError, OSError) as error:
                log.warning("outbox announcements unheard (polling only): %s", error)
                await asyncio.sleep(1.0)
            finally:
                await pubsub.aclose()  # type: ignore[no-untyped-call]
                await client.aclose()

    async def _prefetch(self, head: int) -> None:
        """Have the stretch each group of waiters will ask for read first.

        Streams in step share a start, so this is one read; a few starts are read
        at once, more (streams far apart) are left to the streams themselves. A
        failed read only means the streams read it again.
        """
        starts = {w.seen for w in self.log if head > w.seen and not w.future.done()}
        if self.prefetch is None or not starts or len(starts) > PREFETCH_STARTS:
            return
        prefetch = self.prefetch
        with contextlib.suppress(Exception):
            await asyncio.gather(*(prefetch(start, head) for start in starts))

    async def _pause(self, seconds: float) -> None:
        """Sleep until the next poll is due, or until a commit is announced."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._woken.wait(), seconds)
        self._woken.clear()

    async def _run(self) -> None:
        """Poll while anyone waits, then end (the next waiter starts it again).

        A poll comes every interval, or at once when a commit is announced. When
        newer messages wait behind the readable head (a gap on PostgreSQL), the next
        look comes within the commit grace, whatever the interval.
        """
        interval = poll_interval_s()
        while self.jobs or self.log:
            job_ids = list(self.jobs)
            try:
                versions, head, behind = await db_call(
                    _poll_once, job_ids, bool(self.log)
                )
            except Exception:  # a failed look only delays the waiters
                self.stats.failures += 1
                log.warning("realtime change poll failed", exc_info=True)
                await asyncio.sleep(interval)
                continue
            self.stats.polls += 1
            for job_id in job_ids:
                current = versions.get(job_id)
                for waiter in self.jobs.get(job_id, []):
                    if current != waiter.seen and not waiter.future.done():
                        waiter.future.set_result(current)
            if head is not None:
                await self._prefetch(head)
                for waiter in self.log:
                    if head > waiter.seen and not waiter.future.done():
                        waiter.future.set_result(head)
            grace = LOG_GRACE.total_seconds()
            await self._pause(min(interval, grace) if behind else interval)


L = TypeVar("L")


def loop_local(
    table: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, L],
    make: Callable[[], L],
) -> L:
    """Return the running event loop's entry of ``table``, made on first use.

    One per loop, so one per daphne process (tests run several loops in one).
    """
    loop = asyncio.get_running_loop()
    found = table.get(loop)
    if found is None:
        found = table[loop] = make()
    return found


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ChangeHub] = (
    weakref.WeakKeyDictionary()
)


def change_hub() -> ChangeHub:
    """Return the hub of the running event loop (one per daphne process)."""
    return loop_local(_hubs, ChangeHub)


# --- counters ------------------------------------------------------------------

_redis_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
    weakref.WeakKeyDictionary()
)


def _async_redis() -> Any:
    loop = asyncio.get_running_loop()
    client = _redis_clients.get(loop)
    if client is None:
        client = redis.asyncio.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=1.0
        )
        _redis_clients[loop] = client
    return client


def _incrby(pipe: Any, name: str, amount: int) -> None:
    pipe.incrby(COUNTER_PREFIX + name, amount)


# 1,000 streams opening at once are one pipelined write, not 1,000 connections.
_counters = LoopCounters("realtime counters", _async_redis, _incrby)


async def counter_add(**amounts: int) -> None:
    """Add to the shared counters; a Redis failure is logged, never raised.

    Calls on one event loop join one batch (``realtime.batching``); each caller
    returns once the write holding its amounts is done, so a client that reads the
    counters after an answer finds it counted.
    """
    unknown = set(amounts) - set(COUNTERS)
    if unknown:
        raise ValueError(f"unknown realtime counters: {sorted(unknown)}")
    await _counters.add(amounts)


def counters_read(client: redis.Redis | None = None) -> dict[str, int]:
    """Return every counter (0 when never written), from any process."""
    client = client or redis.Redis.from_url(settings.REDIS_URL)
    values = client.mget([COUNTER_PREFIX + name for name in COUNTERS])
    return {name: int(value or 0) for name, value in zip(COUNTERS, values, strict=True)}
