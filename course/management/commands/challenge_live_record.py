"""``manage.py challenge_live_record SLUG [ID ...]``: record the live runs that
``lesson_check`` proves a challenge's ``live`` conditions on.

For each challenge of the lesson with live conditions (or the ids given), the lab's
live part runs the challenge's ``solution`` and its ``wrong`` answer, each in a
sandbox of its own as a learner's live run does (``course.sandbox``), and their live
tables are kept in ``course/challenges/recorded/<slug>.json``. What each run showed
is printed; the file is written whatever it showed, so ``lesson_check`` can say
which condition missed and by how much.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from course.challenges.grading import challenge_live_read
from course.challenges.recorded import (
    RecordedRun,
    Recording,
    live_only,
    recording_write,
)
from course.challenges.spec import Challenge, lesson_challenges
from course.labs.harness.base import Lab, LabError
from course.labs.registry import lab_get
from course.sandbox import lab_run_sandboxed


class Command(BaseCommand):
    help = "Run a lesson's live-checked challenges live and record the runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="the lesson's slug")
        parser.add_argument("ids", nargs="*", help="only these challenges")

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str = options["slug"]
        try:
            lab = lab_get(slug)
        except LabError as error:
            raise CommandError(str(error)) from None
        wanted = set(options["ids"])
        chosen = [
            c
            for c in lesson_challenges(slug)
            if c.live_checked and (not wanted or c.id in wanted)
        ]
        unknown = wanted - {c.id for c in chosen}
        if unknown:
            raise CommandError(
                f"no live-checked challenge {', '.join(sorted(unknown))} in {slug}"
            )
        if not chosen:
            raise CommandError(f"{slug} has no challenge with live conditions")
        for challenge in chosen:
            self._record(lab, challenge)

    def _record(self, lab: Lab[Any], challenge: Challenge) -> None:
        runs = {}
        for what, answer in (
            ("solution", challenge.solution),
            ("wrong", challenge.wrong),
        ):
            try:
                params = lab.resolve({**challenge.settings, **answer})
                started = time.monotonic()
                result = lab_run_sandboxed(lab, params, live=True)
            except LabError as error:
                raise CommandError(f"{challenge.id} {what}: {error}") from None
            seconds = round(time.monotonic() - started, 1)
            runs[what] = RecordedRun(params, live_only(result["tables"]), seconds)
            reading = challenge_live_read(challenge, params, result["tables"])
            self.stdout.write(
                f"{challenge.id} {what} ({seconds:g} s): {reading.verdict.headline}"
            )
            for condition in reading.verdict.conditions:
                mark = "held" if condition.held else "missed"
                self.stdout.write(f"  {mark}: {condition.said}")
        path = recording_write(
            challenge.slug,
            challenge.id,
            Recording(
                timezone.now().isoformat(timespec="seconds"),
                runs["solution"],
                runs["wrong"],
            ),
        )
        self.stdout.write(f"{challenge.id}: recorded in {path.name}")
