"""The nudge: wake a drainer, or queue a drain of a lane on rq when none is alive.

Two ways to drain a lane, and the nudge picks one:

- A live drainer (``manage.py drainer``, ``messaging.drainer``) blocks on the lane's
  wake-up list in Redis; the nudge pushes one wake-up (the list holds at most one:
  a drainer that wakes drains everything committed before its pass). Drainers
  announce themselves in a sorted set scored by when their announcement expires.
- With no drainer alive, the nudge queues an rq drain job (``messaging.tasks.drain``)
  as it always did: the fallback a worker with the ``messaging`` queue still serves.

Imports rq and Redis only, so every service that commits work (publish, redrive,
rewind) can nudge the drain without importing the drain itself. The job is named by
its dotted path, the rq entry point queued jobs and running workers know.
"""

from __future__ import annotations

import functools
import logging
import time

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


# A lane's wake-up list: a drainer BLPOPs it; a nudge pushes one entry and trims the
# list to one, so a burst of commits leaves a single wake-up.
WAKE_KEY = "messaging:wake"
# Live drainers: member = drainer name, score = when its announcement expires (Unix
# seconds). A drainer killed without a goodbye stops counting once its score passes.
DRAINERS_KEY = "messaging:drainers"


# Commits nudged per lane, counted (INCR in the nudge's pipeline): a drainer that
# gathers a batch (messaging.drainer) reads how many arrived since the lane's last
# pass, so it waits no longer than a batch takes to build up.
COMMITS_KEY = "messaging:commits"
# A lane's last pass, shared by its drainers (a hash: "at", Unix seconds; "commits",
# the counter when it began; "full", 1 while a backlog is being worked through).
PASS_KEY = "messaging:last-pass"


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


def wake_key(lane: str) -> str:
    """Return the Redis list a drainer of ``lane`` blocks on."""
    return WAKE_KEY if lane == "main" else f"{WAKE_KEY}:{lane}"


def commits_key(lane: str) -> str:
    return COMMITS_KEY if lane == "main" else f"{COMMITS_KEY}:{lane}"


def pass_key(lane: str) -> str:
    return PASS_KEY if lane == "main" else f"{PASS_KEY}:{lane}"


def nudge_drain(lane: str = "main", *, announce: bool = False) -> None:
    """Wake a drainer of ``lane``, or queue an rq drain when no drainer is alive.

    Runs after commit. One round trip when a drainer is alive (wake-up, trim, the
    commit count and the drainers' count in one pipeline, plus the log's
    announcement when ``announce``); without one, the rq job is queued unless one
    is already waiting. A Redis failure only delays the work: the scheduler's sweep
    nudges again.
    """
    try:
        connection = _redis()
        key = wake_key(lane)
        with connection.pipeline(transaction=False) as pipe:
            pipe.lpush(key, b"1")
            pipe.ltrim(key, 0, 0)
            pipe.incr(commits_key(lane))
            pipe.zcount(DRAINERS_KEY, time.time(), "+inf")
            if announce:
                pipe.publish(LOG_CHANNEL, b"1")
            drainers = pipe.execute()[3]
        if drainers:
            return
        if connection.set(queued_key(lane), "1", nx=True, ex=10):
            django_rq.get_queue(QUEUE, connection=connection).enqueue(
                DRAIN_JOB, lane=lane
            )
    except RedisError as error:
        log.warning("could not nudge the messaging drain (the sweep will): %s", error)


def published() -> None:
    """After a commit that appended to the outbox: nudge the relay, tell listeners.

    The announcement rides in the nudge's pipeline. It is a hint: a listener that
    misses it (Redis down, not yet subscribed) still finds the message at its next
    poll.
    """
    nudge_drain(announce=True)
