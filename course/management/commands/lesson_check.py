"""``manage.py lesson_check [SLUG ...]``: check lessons against course/AUTHORING.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from course.lesson_checks import lesson_problems
from course.lessons import LESSONS, lesson_get
from course.textbook import CONTENT_DIR

OVERLAP_TOOL = (
    Path(__file__).resolve().parents[3].parent / "shared/tools/course_overlap.py"
)


def _overlap(path: Path) -> list[str]:
    """Run the course's overlap tool (when it is there) at 10 and 8 words."""
    if not OVERLAP_TOOL.is_file() or not path.is_file():
        return []
    found: list[str] = []
    for words in ("10", "8"):
        done = subprocess.run(
            [sys.executable, str(OVERLAP_TOOL), "--words", words, str(path)],
            capture_output=True,
            text=True,
            check=False,
            cwd=path.parents[2],
        )
        found += [
            f"repeats the course: {line}" for line in done.stdout.splitlines() if line
        ]
    return found


class Command(BaseCommand):
    help = "Check lesson texts (all, or the slugs given); exit status 2 on any problem."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slugs", nargs="*")
        parser.add_argument(
            "--no-overlap", action="store_true", help="skip the overlap tool"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        lessons = [lesson_get(slug) for slug in options["slugs"]] or list(LESSONS)
        if None in lessons:
            raise CommandError("unknown slug; slugs are those of course/lessons.py")
        failed = 0
        for lesson in lessons:
            assert lesson is not None
            problems = lesson_problems(lesson)
            if not options["no_overlap"]:
                problems += _overlap(CONTENT_DIR / f"{lesson.slug}.md")
            mark = "ok" if not problems else f"{len(problems)} problem(s)"
            self.stdout.write(f"{lesson.slug}: {mark}")
            for problem in problems:
                self.stdout.write(f"  - {problem}")
            failed += bool(problems)
        if failed:
            self.stderr.write(f"{failed} lesson(s) with problems")
            sys.exit(2)
