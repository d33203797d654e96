"""The scheduler process: enqueue periodic tasks when they fall due.

Last enqueue times live in Redis, so a restarted scheduler does not run everything
again at once, and the rq jobs themselves are idempotent (pruning twice is harmless).
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
from django.utils import timezone
from django.utils.module_loading import import_string

from jobs.schedule import PERIODIC_TASKS, due_tasks

log = logging.getLogger("jobs.scheduler")
LAST_RUN_KEY = "scheduler:last-enqueued"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
            time.sleep(options["interval"])

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        # Finish the pass in hand, then leave the loop.
        self.stopping = True

    def step(self) -> list[str]:
        """Enqueue every due task once; return their names."""
        connection = django_rq.get_connection("default")
        stored = connection.hgetall(LAST_RUN_KEY)
        last = {
            _text(key): datetime.datetime.fromisoformat(_text(value))
            for key, value in stored.items()
        }
        now = timezone.now()
        enqueued = []
        for task in due_tasks(PERIODIC_TASKS, last, now):
            if task.inline:
                import_string(task.func)(**task.kwargs)
            else:
                django_rq.get_queue(task.queue).enqueue(task.func, **task.kwargs)
            connection.hset(LAST_RUN_KEY, task.name, now.isoformat())
            enqueued.append(task.name)
        return enqueued
