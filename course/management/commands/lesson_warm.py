"""Render every lesson once, so the first visitor of a page does not wait for it.

    manage.py lesson_warm

A lesson's page fills its figures from its lab's model, some of them with changed
parameters (the queueing labs' simulations take seconds). The runs are kept on disk
(``course.textbook``), so one warm-up serves every process until the labs' code
changes. ``make run`` runs it after the migrations. It also runs each challenge's
search for its best answer (``course.challenges``), so checking one is a disk read.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand

from course.challenges.grading import challenge_best
from course.challenges.spec import lesson_challenges
from course.lessons import LESSONS
from course.textbook import lesson_text


class Command(BaseCommand):
    help = "Render every lesson once (fills the cache of model runs)."

    def handle(self, *args: Any, **options: Any) -> None:
        began = time.monotonic()
        for lesson in LESSONS:
            lesson_text(lesson.slug)
            for challenge in lesson_challenges(lesson.slug):
                if challenge.usable and challenge.direction:
                    challenge_best(challenge)
        self.stdout.write(
            f"{len(LESSONS)} lessons rendered in {time.monotonic() - began:.1f} s"
        )
