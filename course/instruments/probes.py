"""The ``lab_probe`` message type and its subscriptions: effects the course's live labs
can count and break.

Registered from ``CourseConfig.ready()`` (``probes_register``): the type, the three
lab subscriptions (``lab_probe``, ``lab_slow``, ``lab_late``) and, through the
decorators below, their handlers. The system apps know none of it.

A probe message's body says what should go wrong, so a lab can reproduce a lesson's
failure on real worker processes:

- ``crash_once``: the worker process kills itself (SIGKILL) in the middle of the
  effect, the first time only. "First time" is a token file the lab creates and the
  handler removes before dying; a file, because the rolled-back transaction cannot
  remember anything and Redis I/O has no place inside it.
- ``crash_always``: the process dies on every attempt (a poison message).
- ``fail``: the effect raises until the lab creates the "fixed" file (a permanent
  failure whose cause an operator later repairs).
- ``sleep_ms``: the effect takes this long (longer than the lease: redelivery).
"""

from __future__ import annotations

import datetime
import os
import signal
import time
from pathlib import Path
from typing import Final

from django.conf import settings

from course.models import ProbeEffect
from messaging.models import OutboxMessage
from messaging.policies import Backoff
from messaging.registry import (
    Subscription,
    message_type_register,
    outside_handler,
    subscription_handler,
    subscription_register,
)

# Published only by the course's live labs: a measurable effect with crash points.
LAB_PROBE: Final = "lab_probe"

LAB_SUBSCRIPTIONS = (
    Subscription(
        name="lab_slow",
        accepts=frozenset({LAB_PROBE}),
        outside=True,
        lane="slow",
        starts_active=False,
    ),
    Subscription(
        name="lab_late",
        accepts=frozenset({LAB_PROBE}),
        starts_active=False,
    ),
    Subscription(
        name="lab_probe",
        accepts=frozenset({LAB_PROBE}),
        # The threshold of the dead-letter and poison lessons.
        max_attempts=3,
        backoff=Backoff(base_ms=50, cap_ms=400),
        # Short: a lab waits seconds, not half a minute, for a dead worker's lease.
        visibility=datetime.timedelta(seconds=2),
    ),
)


def probes_register() -> None:
    """Declare the probe type and the lab subscriptions in the messaging registry."""
    message_type_register(LAB_PROBE)
    subscription_register(*LAB_SUBSCRIPTIONS)


def probe_dir(run: str) -> Path:
    """Return the folder holding a lab run's crash tokens and fix markers."""
    path = Path(settings.VAR_DIR) / "probes" / run
    path.mkdir(parents=True, exist_ok=True)
    return path


def crash_token(run: str, seq: int) -> Path:
    return probe_dir(run) / f"crash-{seq}"


def fixed_marker(run: str) -> Path:
    return probe_dir(run) / "fixed"


class ProbeFailure(RuntimeError):
    """The probe's simulated permanent failure."""


def _die() -> None:
    # No exception, no cleanup, no rollback message: the process is simply gone.
    os.kill(os.getpid(), signal.SIGKILL)


@subscription_handler("lab_probe")
def apply_probe(message: OutboxMessage) -> None:
    """Apply the probe's effect, after whatever failure its body asks for."""
    body = message.body
    run, seq = str(body["run"]), int(body["seq"])
    if body.get("sleep_ms"):
        time.sleep(int(body["sleep_ms"]) / 1000)
    if body.get("crash_always"):
        _die()
    if body.get("fail") and not fixed_marker(run).exists():
        raise ProbeFailure(f"probe {seq}: the resource it needs is missing")
    ProbeEffect.objects.create(run=run, seq=seq, message=message)
    if body.get("crash_once"):
        try:
            crash_token(run, seq).unlink()
        except FileNotFoundError:
            return  # the crash already happened on an earlier attempt
        _die()  # after the effect, before the commit: the effect rolls back


@outside_handler("lab_slow")
def slow_probe_work(message: OutboxMessage) -> None:
    """The slow subscriber's slow part (a stand-in for a network call): it runs
    outside the delivery's transaction, so it never holds the database."""
    time.sleep(int(message.body.get("slow_ms", 0)) / 1000)


@subscription_handler("lab_slow")
def apply_slow_probe(message: OutboxMessage) -> None:
    """The publish-subscribe lab's deliberately slow subscriber: record the effect."""
    body = message.body
    ProbeEffect.objects.create(
        run=str(body["run"]), seq=int(body["seq"]), message=message, mode="lab_slow"
    )


@subscription_handler("lab_late")
def apply_late_probe(message: OutboxMessage) -> None:
    """The publish-subscribe lab's late subscriber: records what reached it."""
    body = message.body
    ProbeEffect.objects.create(
        run=str(body["run"]), seq=int(body["seq"]), message=message, mode="lab_late"
    )
