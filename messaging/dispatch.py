"""The nudge: queue a drain of a lane on rq, at most one waiting per lane.

Imports rq and Redis only, so every service that commits work (publish, redrive,
rewind) can nudge the drain without importing the drain itself. The job is named by
its dotted path, the rq entry point queued jobs and running workers know.
"""

from __future__ import annotations

import logging

import django_rq
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


def queued_key(lane: str) -> str:
    """Return the Redis key marking a queued drain of ``lane``."""
    return QUEUED_KEY if lane == "main" else f"{QUEUED_KEY}:{lane}"


def nudge_drain(lane: str = "main") -> None:
    """Queue a drain of ``lane`` unless one is already waiting. Runs after commit.

    A Redis failure only delays the work: the scheduler's sweep nudges again.
    """
    try:
        connection = django_rq.get_connection(QUEUE)
        if connection.set(queued_key(lane), "1", nx=True, ex=10):
            django_rq.get_queue(QUEUE).enqueue(DRAIN_JOB, lane=lane)
    except RedisError as error:
        log.warning("could not nudge the messaging drain (the sweep will): %s", error)


def published() -> None:
    """After a commit that appended to the outbox: nudge the relay, tell listeners.

    The announcement is a hint: a listener that misses it (Redis down, not yet
    subscribed) still finds the message at its next poll.
    """
    nudge_drain()
    try:
        django_rq.get_connection(QUEUE).publish(LOG_CHANNEL, b"1")
    except RedisError as error:
        log.warning(
            "could not announce the outbox commit (polls will see it): %s", error
        )
