"""Write ``course/PARAMETERS.md`` from the lab registry.

    manage.py lab_params            print the page
    manage.py lab_params --write    write it to course/PARAMETERS.md
    manage.py lab_params --check    exit status 1 when the file differs from it

The page is built by ``course.params_page`` from each lab's ``Param`` list and the
notes of ``course.params_notes``; run ``--write`` after changing either.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from course.labs.registry import LABS
from course.params_notes import NOTES
from course.params_page import PAGE_PATH, parameters_markdown


def page_text() -> str:
    """Return the page as the registry and the notes make it now."""
    return parameters_markdown({slug: lab.params for slug, lab in LABS.items()}, NOTES)


class Command(BaseCommand):
    help = "Print, write or check course/PARAMETERS.md, built from the lab registry."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--write", action="store_true", help="write the file")
        group.add_argument(
            "--check", action="store_true", help="fail when the file is out of date"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        text = page_text()
        if options["write"]:
            PAGE_PATH.write_text(text, encoding="utf-8")
            self.stdout.write(f"wrote {PAGE_PATH.name}: {len(LABS)} labs")
        elif options["check"]:
            if PAGE_PATH.read_text(encoding="utf-8") != text:
                self.stderr.write(
                    f"{PAGE_PATH.name} is out of date: run manage.py lab_params --write"
                )
                sys.exit(1)
        else:
            self.stdout.write(text, ending="")
