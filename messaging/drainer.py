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
3. Gather (``Drainer.gather_batch``): wait until ``gather`` has passed since the
   lane's last pass began (by any drainer), or until ``batch_goal`` commits have
   been nudged since then, whichever comes first. Every pass pays a fixed set of
   statements (relay, claim, the partitions' heads, the stream consumers) whatever
   it finds, and at 20 loans a second a pass per loan spent most of the drainers'
   CPU on them; a gathered pass spreads them over several loans, for at most
   ``gather`` of latency. At a trickle the last pass is long past and nothing is
   waited for; under a backlog (the last pass was full) nothing is either. While
   one drainer gathers, another one woken drops its wake-up: the gathered pass
   will find that commit, which came before its nudge.
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

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
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

# The lease a drainer holds on a lane while it gathers the lane's next pass.
GATHERING = "messaging:gathering"
# How often a gathering drainer looks at the lane's commit count.
GATHER_POLL_S = 0.02

# How long an announcement lasts: a drainer killed without a goodbye stops being
# counted (and nudges fall back to rq jobs) this long after its last one.
ANNOUNCE_SECONDS = 6.0


# Record a lane's pass (when, the commit count then, whether a backlog is being
# worked through) in one round trip.
_PASS_BEGINS_LUA = """
local commits = redis.call('GET', KEYS[1]) or 0
redis.call('HSET', KEYS[2], 'at', ARGV[1], 'commits', commits, 'full', ARGV[2])
return commits
"""


@dataclass
class Drainer:
    """One drainer process's loop state. ``step`` is its unit of work."""

    redis: Redis
    block: float = 2.0
    gather: float = 0.2
    # Commits that make a batch worth a pass at once (under load, before ``gather``).
    batch_goal: int = 8
    batch: int = CLAIM_BATCH
    # Injected by the tests, which control time instead of sleeping.
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    name: str = field(
        default_factory=lambda: (
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
    )
    report: DrainReport = field(default_factory=DrainReport)
    wakes: int = 0
    _announced: float = 0.0
    _last_streams: float = 0.0
    _gathering: LeaseLock | None = None

    def __post_init__(self) -> None:
        # Run by its digest (EVALSHA); redis-py loads it again after a restart.
        self._pass_script = self.redis.register_script(_PASS_BEGINS_LUA)

    def announce(self) -> None:
        """Tell nudges a drainer is alive, for the next ``ANNOUNCE_SECONDS``."""
        now = time.time()  # compared with the nudges' clock, never a test's
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
        try:
            if not self.gather_batch(lane):
                return False
            self.drain(lane)
        finally:
            self._stop_gathering()
        return True

    def gather_batch(self, lane: str) -> bool:
        """Wait for the lane's next pass to be worth its fixed cost (step 3).

        Return False when another drainer is gathering it already: its pass covers
        the commit that woke this one.
        """
        if self.gather <= 0:
            return True
        started = self.clock()
        # Held until the pass begins; a drainer killed while gathering holds it
        # for at most a second more than the gather.
        mark = LeaseLock(
            self.redis,
            f"{GATHERING}:{lane}",
            lease_ms=int(self.gather * 1000) + 1000,
        )
        if not mark.acquire():
            return False
        self._gathering = mark
        while True:
            at, seen, full, commits = self._lane_state(lane)
            now = self.clock()
            if (
                full
                or commits - seen >= self.batch_goal
                or now >= at + self.gather
                or now - started >= self.gather
            ):
                return True
            self.sleep(GATHER_POLL_S)

    def _lane_state(self, lane: str) -> tuple[float, int, bool, int]:
        """Return the lane's last pass (start, commit count then, full) and the
        commit count now, in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(dispatch.pass_key(lane), ["at", "commits", "full"])
            pipe.get(dispatch.commits_key(lane))
            (at, seen, full), commits = pipe.execute()
        return float(at or 0), int(seen or 0), full == b"1", int(commits or 0)

    def _pass_begins(self, lane: str, *, backlog: bool) -> None:
        """Record the lane's pass for the others' gathering, then stop gathering:
        a commit nudged from now on may come after this pass's relay."""
        self._pass_script(
            keys=[dispatch.commits_key(lane), dispatch.pass_key(lane)],
            args=[self.clock(), int(backlog)],
        )
        self._stop_gathering()

    def _stop_gathering(self) -> None:
        """Give back the lane's gathering mark if this drainer holds it."""
        mark, self._gathering = self._gathering, None
        if mark is not None:
            with contextlib.suppress(RedisError):
                mark.release_if_owned()

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
            backlog = False
            while True:
                began = time.monotonic()
                self._pass_begins(lane, backlog=backlog)
                if backlog:
                    # Let an idle drainer (or rq worker) join in, at once: the
                    # lane's record says a backlog is being worked through.
                    dispatch.nudge_drain(lane)
                    self.announce()
                # At once again after a full pass: a replay reads batch after batch.
                streams = (
                    began - self._last_streams >= STREAMS_EVERY_S
                    or self.report.full_batch
                )
                if streams:
                    self._last_streams = began
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
                backlog = True
                if timezone.now() >= deadline:
                    dispatch.nudge_drain(lane)  # another drain, a fresh deadline
                    return
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


def drain_commits_unflushed() -> None:
    """Have this process's PostgreSQL connections commit without waiting for the
    disk flush (``synchronous_commit = off``), unless
    ``MESSAGING_DRAIN_SYNCHRONOUS_COMMIT`` asks for the wait.

    For the drainer process only. Every drain transaction then returns as soon as
    PostgreSQL has it in memory; the WAL writer flushes it a fraction of a second
    later. Measured on two cores: the drain's throughput rose by a fifth (6.65x
    rq's no-op jobs to 8.15x), its CPU per loan unchanged: the drainers had been
    waiting on the disk. What a server crash costs: the drain work of that last
    fraction of a second is undone as a whole (each transaction is kept or lost
    entire, in commit order), so its deliveries are claimed and applied again, as
    after a drainer killed mid-batch; an effect and its guard row are never
    split. Redis invalidations and broadcasts of that work are made again, which
    they tolerate. A drainer killed on its own loses nothing: the server has its
    commits. The loan and its outbox message commit synchronously, elsewhere.
    """
    if settings.MESSAGING_DRAIN_SYNCHRONOUS_COMMIT:
        return
    connection_created.connect(_commit_unflushed, dispatch_uid=_UNFLUSHED_UID)
    if connection.connection is not None:  # opened already: set it there too
        _commit_unflushed(sender=None, connection=connection)


_UNFLUSHED_UID = "messaging.drainer.unflushed"


def _commit_unflushed(
    sender: object, connection: BaseDatabaseWrapper, **_: object
) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO off")
