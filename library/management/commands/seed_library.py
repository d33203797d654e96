from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from library.demo_credentials import (
    FILE_NAME,
    credentials_recall,
    credentials_remember,
    database_label,
)
from library.seed import READER_USERNAME, STAFF_USERNAME, seed_library


def _staff_password_works(password: str) -> bool:
    staff = get_user_model().objects.filter(username=STAFF_USERNAME).first()
    return staff is not None and staff.check_password(password)


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
        # One file for every database seeded under this var/ (make run, make
        # cluster): each database's password is kept apart (library.demo_credentials).
        credentials = settings.VAR_DIR / FILE_NAME
        database = database_label(connection.settings_dict)
        if result.staff_password:
            credentials_remember(credentials, database, result.staff_password)
        password = credentials_recall(credentials, database, _staff_password_works)
        if password is not None:
            self.stdout.write(
                f"staff login: {STAFF_USERNAME} / {password}   "
                f"member login: {READER_USERNAME} / {password}"
            )
        else:
            self.stdout.write("demo password unknown: rerun with --reset-password")
