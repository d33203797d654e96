"""The ``lab_probe`` subscription: an effect the course's live labs can count and break.

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

import os
import signal
import time
from pathlib import Path

from django.conf import settings

from messaging.models import OutboxMessage, ProbeEffect


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


def slow_probe_work(message: OutboxMessage) -> None:
    """The slow subscriber's slow part (a stand-in for a network call): it runs
    outside the delivery's transaction, so it never holds the database."""
    time.sleep(int(message.body.get("slow_ms", 0)) / 1000)


def apply_slow_probe(message: OutboxMessage) -> None:
    """The publish-subscribe lab's deliberately slow subscriber: record the effect."""
    body = message.body
    ProbeEffect.objects.create(
        run=str(body["run"]), seq=int(body["seq"]), message=message, mode="lab_slow"
    )


def apply_late_probe(message: OutboxMessage) -> None:
    """The publish-subscribe lab's late subscriber: records what reached it."""
    body = message.body
    ProbeEffect.objects.create(
        run=str(body["run"]), seq=int(body["seq"]), message=message, mode="lab_late"
    )
