"""The lab worker: take lab runs round-robin across learners (course.labworker).

    manage.py labworker [--live-slots N] [--model-slots M]

Ctrl-C or SIGTERM stops it warmly: live runs in hand go back in line.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from config.processes import run_below_the_library
from course.labworker import LabWorker


class Command(BaseCommand):
    help = "Run lab runs: live and model slots, taken in turn across learners."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--live-slots",
            type=int,
            default=settings.LAB_LIVE_SLOTS,
            help="live runs at once (default LIBRARY_LAB_LIVE_SLOTS: one per core)",
        )
        parser.add_argument(
            "--model-slots",
            type=int,
            default=settings.LAB_MODEL_SLOTS,
            help="model runs at once (default LIBRARY_LAB_MODEL_SLOTS)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # Below the library's own processes, and so is everything a run starts.
        run_below_the_library()
        worker = LabWorker(
            live_slots=max(0, options["live_slots"]),
            model_slots=max(0, options["model_slots"]),
            lease_s=float(settings.LAB_LEASE_S),
        )

        def stop(signum: int, frame: FrameType | None) -> None:
            worker.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        worker.run()
