"""The lab worker process: slots that take lab runs in turn, and their heartbeat.

One process (``manage.py labworker``, the ``labs`` line of the Procfile) runs:

- **live slots**, one per core by default: a live run starts worker and server
  processes of its own, so a host never takes more live runs at once than it has
  cores to give them;
- **model slots** of their own, so a model run (milliseconds to seconds) never
  waits behind a live run (tens of seconds);
- a **heartbeat** that renews the leases of the runs in hand, records the worker's
  slots (the lesson pages estimate waits from them), fails runs whose worker died,
  tells waiting runs their place, and sweeps sandboxes left by a killed worker;
- a **wake-up listener** on Redis, so an idle slot starts a new run at once
  instead of at its next poll.

The whole process runs at a lower CPU priority (``LAB_NICE``), and so does every
process a live run starts, so a class's runs yield the CPU to the library's own web
servers and workers. Any number of lab workers may run on any number of hosts that
reach the same database and Redis: the runs are claimed by compare-and-set.

A first SIGTERM or SIGINT stops the worker warmly: no new run is taken, the
processes of live runs in hand are killed and those runs go back in line for
another worker; model runs get a short grace to finish.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.db import close_old_connections, connection
from django.utils import timezone

from course.sandbox import sandbox_owned_kill, sandbox_sweep
from course.services.labwake import POLL_S, lab_wake_listen
from course.services.labwork import (
    lab_leases_renew,
    lab_queue_announce,
    lab_run_carry_out,
    lab_run_take,
    lab_runs_expire,
    lab_runs_hand_back,
    lab_worker_gone,
    lab_worker_seen,
)

log = logging.getLogger("course.labs")

# How long model runs in hand may take to finish once the worker is told to stop.
STOP_GRACE_S = 10.0
# The sandbox sweep runs this often from the heartbeat (a killed worker's leftovers).
SWEEP_EVERY_S = 60.0


@dataclass
class LabWorker:
    """A lab worker: ``live_slots`` and ``model_slots`` threads and a heartbeat."""

    live_slots: int
    model_slots: int
    lease_s: float
    name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    stopping: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Condition = field(default_factory=threading.Condition)
    _busy: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        """Work until ``stop`` is called; then hand back what could not finish."""
        started = timezone.now()
        self._beat(started)
        threads = [
            self._thread(f"live-{n}", lambda: self._slot(live=True))
            for n in range(self.live_slots)
        ] + [
            self._thread(f"model-{n}", lambda: self._slot(live=False))
            for n in range(self.model_slots)
        ]
        helpers = [
            self._thread("wake", lambda: lab_wake_listen(self.wake, self.stopping)),
            self._thread("heartbeat", lambda: self._heartbeat(started)),
        ]
        log.info(
            "lab worker %s: %s live and %s model slots",
            self.name,
            self.live_slots,
            self.model_slots,
        )
        self.stopping.wait()
        self.wake()
        sandbox_owned_kill()  # live runs in hand fail fast, and go back in line
        for thread in threads:
            thread.join(timeout=STOP_GRACE_S)
        for thread in helpers:
            thread.join(timeout=POLL_S * 2)
        close_old_connections()
        # A model run that outlived the grace goes back in line; its thread's late
        # writes no longer take (they are the lease holder's only).
        lab_runs_hand_back(owner=self.name)
        lab_worker_gone(name=self.name)
        connection.close()

    def stop(self) -> None:
        """Ask the worker to stop taking runs and wind down (signal-safe)."""
        self.stopping.set()

    def wake(self) -> None:
        """Wake idle slots: a run may be waiting."""
        with self._wake:
            self._wake.notify_all()

    def step(self, *, live: bool) -> bool:
        """Take and carry out one run of this kind; False when none was waiting."""
        _drop_stale_connection()
        job = lab_run_take(live=live, owner=self.name, lease_s=self.lease_s)
        if job is None:
            return False
        lab_queue_announce(live=live)  # the line moved up
        with self._busy_slot(live):
            lab_run_carry_out(job=job, owner=self.name, stopping=self.stopping)
        lab_queue_announce(live=live)  # a slot came free: estimates change
        return True

    # --- threads ---------------------------------------------------------------

    def _thread(self, name: str, target: Callable[[], None]) -> threading.Thread:
        def guarded() -> None:
            try:
                target()
            finally:
                connection.close()  # this thread's own connection

        thread = threading.Thread(target=guarded, name=f"labworker-{name}", daemon=True)
        thread.start()
        return thread

    def _slot(self, *, live: bool) -> None:
        while not self.stopping.is_set():
            try:
                if self.step(live=live):
                    continue
            except Exception:
                # A database hiccup must not end the slot: log, wait, try again.
                kind = "live" if live else "model"
                log.exception("lab worker %s: a %s slot failed", self.name, kind)
            with self._wake:
                if not self.stopping.is_set():
                    self._wake.wait(timeout=POLL_S)

    def _heartbeat(self, started: datetime.datetime) -> None:
        every = max(1.0, self.lease_s / 4)
        swept_at = 0.0
        while not self.stopping.wait(every):
            try:
                close_old_connections()
                self._beat(started)
                if (now := time.monotonic()) - swept_at >= SWEEP_EVERY_S:
                    swept_at = now
                    sandbox_sweep()
            except Exception:
                log.exception("lab worker %s: heartbeat failed", self.name)

    def _beat(self, started: datetime.datetime) -> None:
        lab_leases_renew(owner=self.name, lease_s=self.lease_s)
        with self._lock:
            busy = (self._busy[True], self._busy[False])
        lab_worker_seen(
            name=self.name,
            host=socket.gethostname(),
            pid=os.getpid(),
            slots=(self.live_slots, self.model_slots),
            busy=busy,
            started_at=started,
        )
        lab_runs_expire()
        lab_queue_announce(live=True)
        lab_queue_announce(live=False)

    @contextlib.contextmanager
    def _busy_slot(self, live: bool) -> Iterator[None]:
        with self._lock:
            self._busy[live] += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy[live] -= 1


def _drop_stale_connection() -> None:
    # A slot outlives many runs: never carry a connection the database dropped into
    # the next one. Inside an atomic block (a test stepping a slot in-process)
    # closing would doom the surrounding transaction, and nothing there is stale.
    if not connection.in_atomic_block:
        close_old_connections()
