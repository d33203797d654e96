"""The processes of an operator drill (``course.drills``).

    manage.py drill supervise JOB   the drill's supervisor (started by the drill page)
    manage.py drill agent SLUG      seeds and checks, inside the drill's sandbox
    manage.py drill produce         the full-queue drill's producer, in its sandbox

``agent`` and ``produce`` refuse to run outside a sandbox: they would seed an
incident into (and produce load on) the operator's own system.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from course.drills.agent import agent_serve
from course.drills.catalogue import DRILLS, drill_get
from course.drills.supervisor import supervise
from course.drills.workload import producer_run
from course.sandbox import SANDBOX_ENV


class Command(BaseCommand):
    help = "Run one process of an operator drill."
    # Started by a drill, on a site whose web server has run the system checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="mode", required=True)
        supervisor = sub.add_parser("supervise", help="run one drill's supervisor")
        supervisor.add_argument("job", type=uuid.UUID)
        agent = sub.add_parser("agent", help="seed and check, inside the sandbox")
        agent.add_argument("slug", choices=[d.slug for d in DRILLS])
        sub.add_parser("produce", help="the full-queue drill's producer")

    def handle(self, *args: Any, **options: Any) -> None:
        mode = options["mode"]
        if mode == "supervise":
            sys.exit(supervise(options["job"]))
        if not os.environ.get(SANDBOX_ENV):
            raise CommandError(
                f"drill {mode} runs only inside a sandbox ({SANDBOX_ENV})"
            )
        if mode == "produce":
            producer_run()
            return
        drill = drill_get(options["slug"])
        assert drill is not None
        agent_serve(drill, sys.stdin, sys.stdout)
