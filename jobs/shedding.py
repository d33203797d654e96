"""Load shedding in front of the HTTP app: refuse overload with a quick 503.

"Admission" here means load shedding: deciding, before any work starts, whether a
request runs now, waits for a place, or is refused (the ``ADMISSION_*`` settings and
``AdmissionControl`` keep that name).

Under overload a server that accepts everything makes every request late
(congestion collapse). ``AdmissionControl`` bounds concurrency instead, per daphne
process, on its event loop (no locks: every decision runs between two awaits). The
policy it applies (the classes of routes, the bounds) is ``jobs.shedding_policy``:

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
``config.asgi`` mounts it outermost on the HTTP app.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from jobs.shedding_policy import Limits, Priority, route_class

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("jobs.shedding")

LOG_EVERY_S: Final = 10.0
SHED_FLUSH_S: Final = 1.0
SHED_BODY: Final = b"shed\n"


class ShedRecorder(Protocol):
    """Where shed requests are recorded beyond this process's own counters."""

    def record(self, priority: str, reason: str) -> None:
        """Count one shed request; no I/O (called on the event loop)."""

    def flush(self) -> None:
        """Write what ``record`` buffered; may block (never called on the loop)."""


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
