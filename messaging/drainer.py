"""The drainer: a long-lived drain loop that never forks, woken through Redis.

An rq drain job pays for a fork and a fresh database connection (django-rq closes
every connection before it forks) whatever it finds, and at a trickle it finds one
loan's messages: most of a loan's cost was that overhead. A drainer keeps one
process and one connection, and sleeps in Redis (``BLPOP`` on the lanes' wake-up
lists, ``messaging.dispatch``) until a commit nudges it, so a quiet system costs a
wake-up every ``block`` seconds and nothing else.

One step (``Drainer.step``):

1. Announce itself (at most once a second): while its announcement lasts, nudges
   wake drainers instead of queueing rq jobs.
2. Block on the wake-up lists for up to ``block`` seconds; on a timeout, return.
3. Wait until ``gather`` has passed since its last pass began: under a steady
   stream of commits a pass then takes several loans at once instead of one each,
   for at most ``gather`` of latency. At a trickle the last pass is long past and
   nothing is waited for.
4. Pass (``messaging.services.drain.drain_pass``). Pass again at once only while a
   pass may have left due work behind (a full claim); otherwise go back to the
   lists, which hold a wake-up if anything committed meanwhile. A quiet spell thus
   costs no empty pass: the wake-up list says whether there is anything to find.

Every guarantee is the drain's own (claims with leases, guard rows, group tries):
a drainer killed mid-batch leaves leases that expire and are claimed again, and
a poison message that kills it is isolated by its death count, as under rq. A
supervisor restarts it (``scripts/supervise.sh`` in the Procfiles).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import DatabaseError, connection
from django.utils import timezone
from redis import Redis
from redis.exceptions import RedisError

from jobs.locks import LeaseLock
from messaging import dispatch
from messaging.registry import PARALLEL_LANES, lanes
from messaging.services.drain import CLAIM_BATCH, DrainReport, drain_pass
from messaging.tasks import BUDGET_SECONDS, RUNNING_LEASE

log = logging.getLogger("messaging")

# The stream consumers read only messages older than their grace (a second, see
# messaging.services.streams): moving them on every pass of a trickle would mostly
# find nothing, at eight statements a time. A drainer moves them at most this often;
# a quiet system's last messages are moved when the sweep's nudge comes.
STREAMS_EVERY_S = 0.5

# How long an announcement lasts: a drainer killed without a goodbye stops being
# counted (and nudges fall back to rq jobs) this long after its last one.
ANNOUNCE_SECONDS = 6.0


@dataclass
class Drainer:
    """One drainer process's loop state. ``step`` is its unit of work."""

    redis: Redis
    block: float = 2.0
    gather: float = 0.05
    batch: int = CLAIM_BATCH
    name: str = field(
        default_factory=lambda: (
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
    )
    report: DrainReport = field(default_factory=DrainReport)
    wakes: int = 0
    _announced: float = 0.0
    _last_pass: float = 0.0
    _last_streams: float = 0.0

    def announce(self) -> None:
        """Tell nudges a drainer is alive, for the next ``ANNOUNCE_SECONDS``."""
        now = time.time()
        if now - self._announced >= 1.0:
            self.redis.zadd(dispatch.DRAINERS_KEY, {self.name: now + ANNOUNCE_SECONDS})
            # Drop announcements that ran out (drainers killed without a goodbye).
            self.redis.zremrangebyscore(dispatch.DRAINERS_KEY, "-inf", now)
            self._announced = now

    def retire(self) -> None:
        """Stop counting as alive: from now on nudges queue rq jobs (if no other)."""
        self.redis.zrem(dispatch.DRAINERS_KEY, self.name)

    def step(self) -> bool:
        """Wait for a wake-up and drain its lane; return whether a lane was drained."""
        self.announce()
        keys = {dispatch.wake_key(lane): lane for lane in lanes()}
        popped = self.redis.blpop(list(keys), timeout=self.block)
        if popped is None:
            return False
        key = popped[0]
        lane = keys[key.decode() if isinstance(key, bytes) else key]
        self.wakes += 1
        pause = self._last_pass + self.gather - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        self.drain(lane)
        return True

    def drain(self, lane: str) -> None:
        """Pass over ``lane`` until a pass leaves nothing due behind it."""
        held: LeaseLock | None = None
        if lane not in PARALLEL_LANES:
            # One drain at a time in such a lane, whether a drainer or an rq job.
            held = LeaseLock(
                self.redis,
                f"{RUNNING_LEASE}:{lane}",
                lease_ms=int(BUDGET_SECONDS * 3000),
            )
            if not held.acquire():
                return  # its running drain passes until nothing is left
        owner = f"{self.name}:{self.wakes}"[:64]
        deadline = timezone.now() + datetime.timedelta(seconds=BUDGET_SECONDS)
        try:
            while True:
                self._last_pass = time.monotonic()
                # At once again after a full pass: a replay reads batch after batch.
                streams = (
                    self._last_pass - self._last_streams >= STREAMS_EVERY_S
                    or self.report.full_batch
                )
                if streams:
                    self._last_streams = self._last_pass
                self.report.lanes_relayed.clear()
                did = drain_pass(
                    self.report,
                    owner=owner,
                    batch=self.batch,
                    lane=lane,
                    deadline=deadline,
                    streams=streams,
                )
                self._wake_other_lanes(lane)
                if not (did and self.report.full_batch):
                    return
                # A backlog: let an idle drainer (or rq worker) join in.
                dispatch.nudge_drain(lane)
                self.announce()
                if timezone.now() >= deadline:
                    return  # the nudge above brings a fresh deadline
        finally:
            if held is not None:
                held.release_if_owned()

    def _wake_other_lanes(self, lane: str) -> None:
        """Wake the drains of the other lanes this pass's relay wrote work for."""
        for other in sorted(self.report.lanes_relayed - {lane}):
            dispatch.nudge_drain(other)

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Step until ``should_stop()``; survive a database or Redis outage.

        The database connection is kept across steps: it is what a drain job paid
        for every time. One that broke is closed and dialled again on next use.
        """
        try:
            while not should_stop():
                try:
                    self.step()
                except (DatabaseError, RedisError) as error:
                    log.warning("drainer %s: %s; again in 1 s", self.name, error)
                    connection.close()
                    time.sleep(1.0)
        finally:
            # On a Redis error its announcement runs out by itself.
            with contextlib.suppress(RedisError):
                self.retire()
