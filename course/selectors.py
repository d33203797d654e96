"""Reads for the course pages."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from course.labs.registry import LABS
from course.lessons import Area, Lesson, lessons_by_area
from course.models import LessonProgress
from jobs.models import JobStatus

LAB_JOB_KIND = "lab"


def lab_job_get(*, job_id: uuid.UUID) -> JobStatus | None:
    """Return the lab run with ``job_id``, or None (unknown id, or not a lab run)."""
    return JobStatus.objects.filter(pk=job_id, kind=LAB_JOB_KIND).first()


def course_outline() -> list[tuple[Area, list[tuple[Lesson, bool]]]]:
    """Return the lessons by area, each with whether its lab is built."""
    return [
        (area, [(lesson, lesson.slug in LABS) for lesson in lessons])
        for area, lessons in lessons_by_area()
    ]


@dataclass(frozen=True)
class ProgressView:
    """A learner's progress on one lesson, as the pages show it."""

    read: bool
    lab_runs: int
    answered: frozenset[int]

    def answered_of(self, total: int) -> int:
        return len({n for n in self.answered if 0 <= n < total})


NO_PROGRESS = ProgressView(read=False, lab_runs=0, answered=frozenset())


def progress_by_slug(*, user_id: int | None) -> dict[str, ProgressView]:
    """Return the learner's progress per lesson slug ({} for an anonymous visitor)."""
    if user_id is None:
        return {}
    return {
        row.slug: ProgressView(
            read=row.read_at is not None,
            lab_runs=row.lab_runs,
            answered=frozenset(n for n in row.answered if isinstance(n, int)),
        )
        for row in LessonProgress.objects.filter(user_id=user_id)
    }


def progress_get(*, user_id: int | None, slug: str) -> ProgressView:
    """Return the learner's progress on one lesson."""
    if user_id is None:
        return NO_PROGRESS
    row = LessonProgress.objects.filter(user_id=user_id, slug=slug).first()
    if row is None:
        return NO_PROGRESS
    return ProgressView(
        read=row.read_at is not None,
        lab_runs=row.lab_runs,
        answered=frozenset(n for n in row.answered if isinstance(n, int)),
    )
