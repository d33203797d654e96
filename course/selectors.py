"""Reads for the course pages."""

from __future__ import annotations

import uuid

from course.labs.registry import LABS
from course.lessons import Area, Lesson, lessons_by_area
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
