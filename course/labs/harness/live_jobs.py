"""rq jobs of the live delivery-semantics lab: one job per message, rq's own semantics.

These run in rq work-horses on a live run's private queue
(``course.labs.harness.live``).
Each job first counts its delivery in Redis, outside any transaction, so the count
survives the horse's death. A "crash" is the horse killing itself with SIGKILL: no
exception, no cleanup; rq's worker process sees its horse gone.

- ``probe_at_most_once``: rq's default. The job left the queue when a worker took
  it (acknowledged on receipt) and is not retried; a crash before the effect loses
  the message.
- ``probe_at_least_once``: enqueued with ``Retry``. The effect commits, then the
  horse dies the first time (token file); rq 3's worker handles a killed horse like
  a failed job and re-enqueues it while retries are left, so the effect repeats.
"""

from __future__ import annotations

import os
import signal

import django_rq

from course.instruments.probes import crash_token
from course.models import ProbeEffect

# Redis key prefix of a live run's delivery counters ("<prefix><run>:<mode>").
COUNTER_PREFIX = "lab-live-"
COUNTER_TTL_S = 3600


def _count_delivery(run: str, mode: str) -> None:
    redis = django_rq.get_connection("messaging")
    key = f"{COUNTER_PREFIX}{run}:{mode}"
    redis.incr(key)
    redis.expire(key, COUNTER_TTL_S)


def _die() -> None:
    # The work-horse is gone at once; its parent, the rq worker, records the loss.
    os.kill(os.getpid(), signal.SIGKILL)


def probe_at_most_once(run: str, seq: int, crash: bool) -> None:
    """Count the delivery; die before the effect when ``crash``, else apply it."""
    _count_delivery(run, "at-most-once")
    if crash:
        _die()
    ProbeEffect.objects.create(run=run, seq=seq, mode="at-most-once")


def probe_at_least_once(run: str, seq: int) -> None:
    """Count the delivery, commit the effect, then die once if a token is waiting."""
    _count_delivery(run, "at-least-once")
    # Autocommit: the effect is committed before the horse can die.
    ProbeEffect.objects.create(run=run, seq=seq, mode="at-least-once")
    try:
        crash_token(run, seq).unlink()
    except FileNotFoundError:
        return  # no token, or the crash already happened on an earlier delivery
    _die()
