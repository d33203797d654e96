"""rq entry points of the messaging spine: drain a lane, trim the log, sweep.

Their dotted paths are what queued jobs and the schedules name, so they stay here;
the work itself is in ``messaging.services`` and the nudge in ``messaging.dispatch``.
"""

from __future__ import annotations

import os
import socket
import uuid

import django_rq
from django.db import close_old_connections, connection

from jobs.locks import LeaseLock, lock_key
from messaging import dispatch
from messaging.registry import PARALLEL_LANES, lanes
from messaging.services.drain import messaging_drain, work_remaining
from messaging.services.streams import log_trim

# A lease (jobs.locks) held while a drain of a one-at-a-time lane runs (see
# registry.PARALLEL_LANES). Owner-checked: a drain that ends never frees the lease
# of the next drain, which may have started while it was still queueing nudges.
RUNNING_LEASE = "messaging-drain"
BUDGET_SECONDS = 10.0


def running_key(lane: str) -> str:
    """Return the Redis key of the lease of a one-at-a-time ``lane``."""
    return lock_key(f"{RUNNING_LEASE}:{lane}")


def drain(lane: str = "main") -> dict[str, int]:
    """Relay and process one lane for a bounded time; re-nudge if work remains."""
    redis = django_rq.get_connection(dispatch.QUEUE)
    redis.delete(dispatch.queued_key(lane))
    parallel = lane in PARALLEL_LANES
    held: LeaseLock | None = None
    if not parallel:
        held = LeaseLock(
            redis, f"{RUNNING_LEASE}:{lane}", lease_ms=int(BUDGET_SECONDS * 3000)
        )
        if not held.acquire():
            return {}  # its running drain re-nudges when it ends
    # Queue the next drain now rather than at the end, so an idle worker can join in:
    # a backlog drains on every worker at once, not on one at a time.
    if parallel and work_remaining(lane=lane):
        dispatch.nudge_drain(lane)
    # A worker outlives many jobs (SimpleWorker) or forks them from a parent that
    # may hold a connection: start and end each drain on a connection of its own.
    if not connection.in_atomic_block:
        close_old_connections()
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    try:
        report = messaging_drain(owner=owner, lane=lane, budget_seconds=BUDGET_SECONDS)
        if held is not None:
            held.release_if_owned()  # before the nudges: the next drain may start
        # The relay of this drain may have copied messages to other lanes.
        for name in lanes():
            if work_remaining(lane=name):
                dispatch.nudge_drain(name)
    finally:
        if held is not None:
            held.release_if_owned()  # once released a no-op; never another's lease
        if not connection.in_atomic_block:
            close_old_connections()
    # The job's result: the counts (the lanes set is the drainer's business).
    return {k: v for k, v in vars(report).items() if k != "lanes_relayed"}


def trim() -> dict[str, object]:
    """The scheduled retention of the outbox log (``services.streams.log_trim``)."""
    return vars(log_trim())


def sweep() -> bool:
    """Nudge a drain of every lane with waiting work; return whether it did.

    Catches what a lost nudge left behind (Redis restarted, flushed, unreachable).
    """
    nudged = False
    for lane in lanes():
        if work_remaining(lane=lane):
            dispatch.nudge_drain(lane)
            nudged = True
    return nudged
