"""The nudge: queue a drain of a lane on rq, at most one waiting per lane.

Imports rq and Redis only, so every service that commits work (publish, redrive,
rewind) can nudge the drain without importing the drain itself. The job is named by
its dotted path, the rq entry point queued jobs and running workers know.
"""

from __future__ import annotations

import functools
import logging

import django_rq
from redis import Redis
from redis.exceptions import RedisError

log = logging.getLogger("messaging")
QUEUE = "messaging"
# The rq entry point of a drain (messaging.tasks.drain), named, not imported.
DRAIN_JOB = "messaging.tasks.drain"
# Set while a lane's drain job waits in the queue; cleared when it starts. A nudge
# arriving meanwhile is covered by that queued job, so a burst of commits queues one
# drain, and a commit after a drain started always queues the next one.
QUEUED_KEY = "messaging:drain-queued"


# Told after every commit that appended to the outbox: a process following the log
# (realtime's change hub) looks at once instead of at its next poll.
LOG_CHANNEL = "messaging:log-moved"


@functools.cache
def _redis() -> Redis:
    """The process's one client for the nudge and the announcement.

    ``django_rq.get_connection`` builds a client with a pool of its own, so a new TCP
    connection, on every call: three per commit, about a third of a loan's issue
    time in a profile. One pool per process is safe across threads, and across an rq
    worker's fork (redis-py starts a fresh pool in the child); a connection broken by
    a Redis restart is dropped and dialled again by the client's retries.
    """
    return django_rq.get_connection(QUEUE)


def queued_key(lane: str) -> str:
    """Return the Redis key marking a queued drain of ``lane``."""
    return QUEUED_KEY if lane == "main" else f"{QUEUED_KEY}:{lane}"


def nudge_drain(lane: str = "main") -> None:
    """Queue a drain of ``lane`` unless one is already waiting. Runs after commit.

    A Redis failure only delays the work: the scheduler's sweep nudges again.
    """
    try:
        connection = _redis()
        if connection.set(queued_key(lane), "1", nx=True, ex=10):
            django_rq.get_queue(QUEUE, connection=connection).enqueue(
                DRAIN_JOB, lane=lane
            )
    except RedisError as error:
        log.warning("could not nudge the messaging drain (the sweep will): %s", error)


def published() -> None:
    """After a commit that appended to the outbox: nudge the relay, tell listeners.

    The announcement is a hint: a listener that misses it (Redis down, not yet
    subscribed) still finds the message at its next poll.
    """
    nudge_drain()
    try:
        _redis().publish(LOG_CHANNEL, b"1")
    except RedisError as error:
        log.warning(
            "could not announce the outbox commit (polls will see it): %s", error
        )
