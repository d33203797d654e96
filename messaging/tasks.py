"""rq jobs and nudges of the messaging spine."""

from __future__ import annotations

import logging
import os
import socket
import uuid

import django_rq
from django.db import close_old_connections, connection
from redis.exceptions import RedisError

from messaging.services import messaging_drain, work_remaining

log = logging.getLogger("messaging")
QUEUE = "messaging"
# Set while a drain job waits in the queue; cleared when it starts. A nudge arriving
# meanwhile is covered by that queued job, so a burst of commits queues one drain, and
# a commit after a drain started always queues the next one.
QUEUED_KEY = "messaging:drain-queued"


def nudge_drain() -> None:
    """Queue a drain unless one is already waiting. Runs after commit.

    A Redis failure only delays the work: the scheduler's sweep nudges again.
    """
    try:
        connection = django_rq.get_connection(QUEUE)
        if connection.set(QUEUED_KEY, "1", nx=True, ex=10):
            django_rq.get_queue(QUEUE).enqueue(drain)
    except RedisError as error:
        log.warning("could not nudge the messaging drain (the sweep will): %s", error)


def drain() -> dict[str, int]:
    """Relay and process deliveries for a bounded time; re-nudge if work remains."""
    django_rq.get_connection(QUEUE).delete(QUEUED_KEY)
    # Queue the next drain now rather than at the end, so an idle worker can join in:
    # a backlog drains on every worker at once, not on one at a time.
    if work_remaining():
        nudge_drain()
    # A worker outlives many jobs (SimpleWorker) or forks them from a parent that
    # may hold a connection: start and end each drain on a connection of its own.
    if not connection.in_atomic_block:
        close_old_connections()
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    try:
        report = messaging_drain(owner=owner)
        if work_remaining():
            nudge_drain()
    finally:
        if not connection.in_atomic_block:
            close_old_connections()
    return vars(report)


def sweep() -> bool:
    """Nudge a drain when work is waiting; return whether it did.

    Catches what a lost nudge left behind (Redis restarted, flushed, unreachable).
    """
    if work_remaining():
        nudge_drain()
        return True
    return False
