"""The scheduler process: claim the due slots of each periodic task and enqueue them.

Slots live in ScheduledTaskState (``next_run_at``), so a restarted scheduler resumes
where it stopped: slots that fell due while it was down are made up or counted as
missed by the task's catch-up policy. Each enqueued run takes the task's lease lock
before working (``jobs.scheduler.scheduled_run``), so overlapping runs skip.
A task an operator paused is claimed like the others but runs nothing: its due slots
are passed and counted (``jobs.scheduler.schedule_claim``).
"""

from __future__ import annotations

import datetime
import logging
import signal
import time
from types import FrameType
from typing import Any

import django_rq
from django.core.management.base import BaseCommand, CommandParser
from django.db import Error
from django.utils import timezone

from config.connections import read_on_kept_connection
from jobs.scheduler import periodic_tasks, schedule_claim, scheduled_run, tasks_due

log = logging.getLogger("jobs.scheduler")
RUN_JOB = "jobs.tasks.scheduled_run"


class Command(BaseCommand):
    help = (
        "Run the scheduler: enqueue periodic tasks when due (Ctrl-C or SIGTERM stops)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="one pass, then exit")
        parser.add_argument(
            "--interval", type=float, default=1.0, help="seconds per pass"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stopping = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        while not self.stopping:
            for name in self.step():
                log.debug("ran or enqueued %s", name)
            if options["once"]:
                return
            # The connection is kept from pass to pass: opening one each second was
            # most of an idle scheduler's work, and the database's.
            time.sleep(options["interval"])

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        # Finish the pass in hand, then leave the loop.
        self.stopping = True

    def step(self, *, now: datetime.datetime | None = None) -> list[str]:
        """Claim and start every due slot once; return the task names, one per slot.

        ``now`` is the pass's clock (the current time unless given), so a test can
        drive passes through days of slots without waiting for them.
        """
        now = timezone.now() if now is None else now
        started: list[str] = []
        try:
            # On the connection kept between passes (dialled again if the server
            # dropped it meanwhile).
            due = read_on_kept_connection(lambda: tasks_due(periodic_tasks(), now))
        except Error as error:
            log.warning(
                "could not read the tasks' slots (%s); next pass in a while", error
            )
            return started
        for task in due:
            try:
                plan = schedule_claim(task=task, now=now)
            except Exception:
                # One task's bad state must not stop the others (the sweep above all).
                log.exception("%s: could not claim its due slots", task.name)
                continue
            if plan is None:
                continue
            for slot in plan.run_slots:
                if task.inline:
                    try:
                        scheduled_run(name=task.name, slot=slot)
                    except Exception:
                        log.exception("%s: inline run failed", task.name)
                else:
                    # A crash between the claim and this enqueue loses the slot: the
                    # next slot comes anyway, and a lost run is better than a double.
                    django_rq.get_queue(task.queue).enqueue(
                        RUN_JOB,
                        name=task.name,
                        slot=slot.isoformat(),
                        job_timeout=task.timeout_seconds,
                    )
                started.append(task.name)
        return started
