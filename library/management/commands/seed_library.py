from __future__ import annotations

import json
import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from library.seed import READER_USERNAME, STAFF_USERNAME, seed_library


class Command(BaseCommand):
    help = (
        "Load the demo library (public-domain catalogue, five branches, members and "
        "loans) and the demo accounts; safe to rerun."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="give the demo accounts a new password (printed only with DEBUG on)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        result = seed_library(reset_password=options["reset_password"])
        added = ", ".join(f"{n} {what}" for what, n in result.created.items())
        self.stdout.write(f"demo library ready ({added} added)")
        if not settings.DEBUG:
            self.stdout.write("demo password not shown: DEBUG is off")
            return
        credentials = settings.VAR_DIR / "demo-credentials.json"
        if result.staff_password:
            credentials.write_text(json.dumps({"password": result.staff_password}))
            os.chmod(credentials, 0o600)
        if credentials.exists():
            password = json.loads(credentials.read_text())["password"]
            self.stdout.write(
                f"staff login: {STAFF_USERNAME} / {password}   "
                f"member login: {READER_USERNAME} / {password}"
            )
        else:
            self.stdout.write("demo password unknown: rerun with --reset-password")
