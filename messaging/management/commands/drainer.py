"""The drainer process (``messaging.drainer``): drains the outbox without forking.

``python manage.py drainer`` runs until SIGTERM or Ctrl-C, which finish the pass in
hand; the Procfiles run it under ``scripts/supervise.sh``, which restarts it if a
message kills it.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

import django_rq
from django.core.management.base import BaseCommand, CommandParser

from messaging import dispatch
from messaging.drainer import Drainer, drain_commits_unflushed


class Command(BaseCommand):
    help = "Drain the outbox in this process, woken by commits (SIGTERM stops)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--gather-ms",
            type=float,
            default=200.0,
            help="longest wait gathering a lane's next pass, counted from the "
            "start of its last one (default 200; 0: pass at every wake-up)",
        )
        parser.add_argument(
            "--batch-goal",
            type=int,
            default=8,
            help="commits that end the gathering at once (default 8)",
        )
        parser.add_argument(
            "--block-s",
            type=float,
            default=2.0,
            help="longest wait for a wake-up before announcing again (default 2)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stopping = False
        drain_commits_unflushed()
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        drainer = Drainer(
            redis=django_rq.get_connection(dispatch.QUEUE),
            block=options["block_s"],
            gather=options["gather_ms"] / 1000,
            batch_goal=options["batch_goal"],
        )
        self.stdout.write(
            f"drainer {drainer.name} started (gather {options['gather_ms']:g} ms)"
        )
        self.stdout.flush()
        drainer.run(lambda: self.stopping)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        # Finish the step in hand (a blocked BLPOP ends within --block-s).
        self.stopping = True
