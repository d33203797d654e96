"""Run one lab's live part inside a sandbox (started by ``course.sandbox``).

    manage.py labsandbox SLUG --params JSON

The parent gives this process the sandbox's environment (its database, the socket
of its own Redis server, the sandbox mark), so everything the live part starts
works in the sandbox too. Stdout carries JSON lines only:
``{"progress": f, "label": l}`` while the part runs, then one answer,
``{"tables": …}`` or ``{"error": "…"}``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from course.labs.harness.base import LabError, clean_tables
from course.labs.registry import lab_get
from course.sandbox import SANDBOX_ENV


class Command(BaseCommand):
    help = "Run a lab's live part in the sandbox this process was given."
    # Started by a live lab run, whose lab worker has run the system checks: each
    # run starts several of these, and the checks (which import every URL and
    # view) would cost each one more than its own work.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--params", required=True, help="the checked parameters")

    def handle(self, *args: Any, **options: Any) -> None:
        if not os.environ.get(SANDBOX_ENV):
            # Run by hand, it would measure (and change) the operator's system.
            raise CommandError(f"labsandbox runs only inside a sandbox ({SANDBOX_ENV})")
        out = sys.stdout

        def say(message: dict[str, Any]) -> None:
            out.write(json.dumps(message) + "\n")
            out.flush()

        def progress(fraction: float, label: str) -> None:
            say({"progress": fraction, "label": label})

        try:
            lab = lab_get(options["slug"])
            params = lab.validate(json.loads(options["params"]))
            say({"tables": clean_tables(lab.live_run(params, progress))})
        except LabError as error:
            say({"error": str(error)})
