"""Admission control in front of the HTTP app: shed load with a quick 503.

Under overload a server that accepts everything makes every request late
(congestion collapse). ``AdmissionControl`` bounds concurrency instead, per daphne
process, on its event loop (no locks: every decision runs between two awaits):

- at most ``max_running`` requests run at once, plus ``reserved`` places only the
  ``critical`` class may use, so a loan return still runs when pages fill the rest;
- at most ``max_queued`` wait; they start best class first, then oldest first; a
  request arriving at a full queue displaces the newest waiter of a lower class, or
  is rejected itself;
- a waiter whose class budget (``budget_ms`` times the class factor) runs out while
  queued is dropped unprocessed: its client has most likely given up;
- a rejection is ``503`` with ``Retry-After`` and a five-byte body, built without
  entering Django; it is counted and summarised in at most one log line every
  ``LOG_EVERY_S`` (an accepted request costs a full access path, a rejection an
  increment);
- given a ``ShedRecorder`` (the composition root hands it one that writes the
  operations history in Redis), each shed is also recorded there: ``record`` is an
  in-memory update on the loop, and a flush is scheduled ``SHED_FLUSH_S`` after the
  first unflushed shed and runs in the loop's default executor, so Redis is never
  awaited on the loop and a burst costs one write per interval;
- exempt routes (long polls, event streams, static files) pass through uncounted:
  they hold connections, not workers. WebSockets never come here (``config.asgi``
  routes them to Channels).

Settings (``config.settings``, from the environment): ``ADMISSION_ENABLED``
(``LIBRARY_ADMISSION``), ``ADMISSION_MAX_RUNNING``, ``ADMISSION_MAX_QUEUED``,
``ADMISSION_RESERVED``, ``ADMISSION_QUEUE_BUDGET_MS``, ``ADMISSION_RETRY_AFTER_S``.

``LabRoutes`` mounts two lab-only endpoints when ``LAB_ROUTES`` is on (only the
daphnes the load-shedding lab, its tests and the benchmark start): ``/_lab/work``
holds a request ``ms`` milliseconds on the event loop, at most
``LAB_WORK_CAPACITY`` at once (0: unbounded), and ``/_lab/wait`` is an exempt
long-poll stand-in.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final, Protocol
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("config.admission")

LOG_EVERY_S: Final = 10.0
SHED_FLUSH_S: Final = 1.0
SHED_BODY: Final = b"shed\n"


class ShedRecorder(Protocol):
    """Where shed requests are recorded beyond this process's own counters."""

    def record(self, priority: str, reason: str) -> None:
        """Count one shed request; no I/O (called on the event loop)."""

    def flush(self) -> None:
        """Write what ``record`` buffered; may block (never called on the loop)."""


class Priority(IntEnum):
    """Request classes; a lower value is served first and shed last."""

    CRITICAL = 0
    NORMAL = 1
    LOW = 2


# A class's queue budget is the base budget times this factor.
BUDGET_FACTOR: Final = {Priority.CRITICAL: 2.0, Priority.NORMAL: 1.0, Priority.LOW: 0.5}

# Path patterns, first match wins; unmatched paths are NORMAL. ``None``: exempt.
ROUTES: Final[tuple[tuple[re.Pattern[str], Priority | None], ...]] = tuple(
    (re.compile(pattern), priority)
    for pattern, priority in (
        # Held connections, not work: long polls, event streams, static files.
        (r"^/static/", None),
        (r"^/realtime/jobs/[^/]+/(wait|events)$", None),
        (r"^/realtime/branches/\d+/events$", None),
        (r"^/jobs/[^/]+/(wait|events)$", None),
        (r"^/_lab/wait$", None),
        # A member at the desk: loans and signing in outrank everything.
        (r"^/loans/\d+/return/$", Priority.CRITICAL),
        (r"^/loans/issue/$", Priority.CRITICAL),
        (r"^/log(in|out)/$", Priority.CRITICAL),
        # Work that can wait for a quieter moment: reports, lab runs, dashboards.
        (r"^/jobs/.*report", Priority.LOW),
        (r"^/(realtime/)?reports?/", Priority.LOW),
        (r"^/course/[^/]+/run$", Priority.LOW),
        (r"^/admin/rq/", Priority.LOW),
    )
)


def route_class(path: str) -> Priority | None:
    """Return the class of ``path``, or None when it is exempt from admission."""
    for pattern, priority in ROUTES:
        if pattern.search(path):
            return priority
    return Priority.NORMAL


@dataclass(frozen=True)
class Limits:
    max_running: int = 32
    max_queued: int = 128
    reserved: int = 2
    budget_ms: int = 10_000
    retry_after_s: int = 1

    def running_limit(self, priority: Priority) -> int:
        extra = self.reserved if priority == Priority.CRITICAL else 0
        return self.max_running + extra

    def budget_s(self, priority: Priority) -> float:
        return self.budget_ms * BUDGET_FACTOR[priority] / 1000


@dataclass(eq=False)
class _Waiter:
    priority: Priority
    arrived: float
    deadline: float
    future: asyncio.Future[str]


@dataclass
class AdmissionStats:
    running: int = 0
    queued: int = 0
    peak_running: int = 0
    peak_queued: int = 0
    admitted: int = 0
    exempt: int = 0
    # (class name, reason) -> count; reasons: full, displaced, deadline
    shed: Counter[tuple[str, str]] = field(default_factory=Counter)


class AdmissionControl:
    """ASGI middleware: run, queue or shed each HTTP request (see the module doc)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: Limits | None = None,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
        shed_recorder: ShedRecorder | None = None,
    ) -> None:
        self.app = app
        self.limits = limits or Limits()
        self.enabled = enabled
        self.clock = clock
        self.stats = AdmissionStats()
        self.shed_recorder = shed_recorder
        self._waiters: list[_Waiter] = []
        self._logged_at = 0.0
        self._unlogged: Counter[tuple[str, str]] = Counter()
        self._flush_scheduled = False

    @classmethod
    def from_settings(
        cls, app: ASGIApp, *, shed_recorder: ShedRecorder | None = None
    ) -> AdmissionControl:
        from django.conf import settings

        limits = Limits(
            max_running=settings.ADMISSION_MAX_RUNNING,
            max_queued=settings.ADMISSION_MAX_QUEUED,
            reserved=settings.ADMISSION_RESERVED,
            budget_ms=settings.ADMISSION_QUEUE_BUDGET_MS,
            retry_after_s=settings.ADMISSION_RETRY_AFTER_S,
        )
        return cls(
            app,
            limits=limits,
            enabled=settings.ADMISSION_ENABLED,
            shed_recorder=shed_recorder,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.enabled:
            await self.app(scope, receive, send)
            return
        priority = route_class(scope.get("path", ""))
        if priority is None:
            self.stats.exempt += 1
            await self.app(scope, receive, send)
            return
        if not await self._admit(priority):
            return await self._reject(send)
        self.stats.admitted += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._release()

    # --- decisions -------------------------------------------------------------------

    async def _admit(self, priority: Priority) -> bool:
        """Return True holding a running place, False when the request is shed.

        1. A place is free for this class and no better waiter is ahead: run.
        2. The queue has room: wait (until handed a place or the budget runs out).
        3. The queue is full: displace the newest waiter of a lower class, or shed.
        """
        stats = self.stats
        if stats.running < self.limits.running_limit(priority) and not any(
            w.priority <= priority for w in self._waiters
        ):
            self._take()
            return True
        if len(self._waiters) >= self.limits.max_queued:
            victim = self._lowest_waiter()
            if victim is None or victim.priority <= priority:
                self._count_shed(priority, "full")
                return False
            self._drop_waiter(victim, "displaced")
        now = self.clock()
        waiter = _Waiter(
            priority,
            now,
            now + self.limits.budget_s(priority),
            asyncio.get_running_loop().create_future(),
        )
        self._waiters.append(waiter)
        stats.queued = len(self._waiters)
        stats.peak_queued = max(stats.peak_queued, stats.queued)
        try:
            await asyncio.wait_for(
                asyncio.shield(waiter.future), timeout=waiter.deadline - now
            )
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            # The connection went away (or the server stops) while queued: give back
            # a place handed over in the meantime, or leave the queue.
            if waiter.future.done():
                if waiter.future.result() == "run":
                    self._release()
            else:
                self._waiters.remove(waiter)
                self.stats.queued = len(self._waiters)
                waiter.future.cancel()
            raise
        if not waiter.future.done():
            self._drop_waiter(waiter, "deadline")
        return waiter.future.result() == "run"

    def _take(self) -> None:
        self.stats.running += 1
        self.stats.peak_running = max(self.stats.peak_running, self.stats.running)

    def _release(self) -> None:
        self.stats.running -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free places to waiters, best class then oldest; drop expired ones."""
        now = self.clock()
        for waiter in [w for w in self._waiters if w.deadline <= now]:
            self._drop_waiter(waiter, "deadline")
        while self._waiters:
            best = min(self._waiters, key=lambda w: (w.priority, w.arrived))
            if self.stats.running >= self.limits.running_limit(best.priority):
                return
            self._waiters.remove(best)
            self.stats.queued = len(self._waiters)
            self._take()
            best.future.set_result("run")

    def _lowest_waiter(self) -> _Waiter | None:
        if not self._waiters:
            return None
        return max(self._waiters, key=lambda w: (w.priority, w.arrived))

    def _drop_waiter(self, waiter: _Waiter, reason: str) -> None:
        self._waiters.remove(waiter)
        self.stats.queued = len(self._waiters)
        if not waiter.future.done():
            waiter.future.set_result("shed")
        self._count_shed(waiter.priority, reason)

    # --- the rejection ---------------------------------------------------------------

    def _count_shed(self, priority: Priority, reason: str) -> None:
        key = (priority.name.lower(), reason)
        self.stats.shed[key] += 1
        self._unlogged[key] += 1
        if self.shed_recorder is not None:
            self.shed_recorder.record(*key)
            self._schedule_shed_flush()
        now = self.clock()
        if now - self._logged_at >= LOG_EVERY_S:
            summary = ", ".join(f"{c}/{r}={n}" for (c, r), n in self._unlogged.items())
            log.warning("admission: shed %s in the last %.0f s", summary, LOG_EVERY_S)
            self._unlogged.clear()
            self._logged_at = now

    def _schedule_shed_flush(self) -> None:
        # One flush per interval however many sheds: under overload a shed must stay
        # an increment, and the write must not wait on Redis on the loop.
        if self._flush_scheduled:
            return
        self._flush_scheduled = True
        loop = asyncio.get_running_loop()
        loop.call_later(SHED_FLUSH_S, self._flush_sheds, loop)

    def _flush_sheds(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flush_scheduled = False  # sheds from now on go to the next flush
        recorder = self.shed_recorder
        if recorder is not None:
            loop.run_in_executor(None, recorder.flush)

    async def _reject(self, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"text/plain"),
                    (b"retry-after", str(self.limits.retry_after_s).encode()),
                    (b"cache-control", b"no-store"),
                    (b"content-length", str(len(SHED_BODY)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": SHED_BODY})


class LabRoutes:
    """Lab-only endpoints in front of ``app`` (mounted only when LAB_ROUTES is on)."""

    def __init__(self, app: ASGIApp, *, work_capacity: int = 0) -> None:
        self.app = app
        self._slots = asyncio.Semaphore(work_capacity) if work_capacity > 0 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path not in ("/_lab/work", "/_lab/wait"):
            await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode())
        try:
            ms = min(60_000, max(0, int(query.get("ms", ["300"])[0])))
        except ValueError:
            ms = 300
        if path == "/_lab/work" and self._slots is not None:
            async with self._slots:
                await asyncio.sleep(ms / 1000)
        else:
            await asyncio.sleep(ms / 1000)
        body = b"accepted\n"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/plain"),
                    (b"cache-control", b"no-store"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def http_stack(app: ASGIApp, *, shed_recorder: ShedRecorder | None = None) -> ASGIApp:
    """Wrap the HTTP app: lab routes when enabled, admission control outermost."""
    from django.conf import settings

    inner = app
    if settings.LAB_ROUTES:
        inner = LabRoutes(inner, work_capacity=settings.LAB_WORK_CAPACITY)
    return AdmissionControl.from_settings(inner, shed_recorder=shed_recorder)
