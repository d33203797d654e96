"""The lab workers' wake-up call: a hint over Redis pub/sub, never the queue itself.

Waiting runs live in the database; a worker with a free slot looks there every
``POLL_S`` seconds anyway. The call after a commit only spares the wait, so a lost
one (Redis away, a worker not yet subscribed) costs a poll interval, nothing more.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

import redis
from django.conf import settings
from redis.exceptions import RedisError

log = logging.getLogger("course.labs")

WAKE_CHANNEL = "lab:wake"
# An idle slot looks for work at least this often, told or not.
POLL_S = 2.0


@functools.cache
def _redis(url: str) -> redis.Redis:
    # One client per process and URL; short timeouts, since a request thread calls
    # it after its commit and must not hang on a Redis that went away.
    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


def lab_workers_wake() -> None:
    """Tell every lab worker that a run is waiting. Runs after the run's commit."""
    try:
        _redis(settings.REDIS_URL).publish(WAKE_CHANNEL, b"1")
    except RedisError as error:
        log.warning("could not wake the lab workers (they poll): %s", error)


def lab_wake_listen(on_wake: Callable[[], None], stop: threading.Event) -> None:
    """Call ``on_wake`` on every call on the channel until ``stop``; survive outages.

    Runs in a worker's thread. A broken subscription is dialled again after a
    second; meanwhile the slots' own polling keeps the queue moving.
    """
    while not stop.is_set():
        try:
            client = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=3 * POLL_S, socket_connect_timeout=1
            )
            pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            with pubsub as subscription:
                subscription.subscribe(WAKE_CHANNEL)
                while not stop.is_set():
                    if subscription.get_message(timeout=POLL_S) is not None:
                        on_wake()
        except RedisError as error:
            log.debug("lab wake-up subscription lost: %s", error)
            stop.wait(1.0)
