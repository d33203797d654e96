"""Reads for the course pages."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from course.labs.registry import LABS
from course.lessons import Area, Lesson, lessons_by_area
from course.models import LabRun, LessonProgress
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


# --- A visitor's runs ----------------------------------------------------------------

_IN_FLIGHT = (JobStatus.State.QUEUED, JobStatus.State.RUNNING)


def lab_runs_in_flight(*, visitor: str) -> int:
    """Return how many of the visitor's lab runs are waiting or running."""
    return LabRun.objects.filter(visitor=visitor, job__state__in=_IN_FLIGHT).count()


@dataclass(frozen=True)
class RunRow:
    """One earlier run as the lesson page lists it."""

    job: JobStatus
    live: bool
    changed: tuple[tuple[str, str], ...]  # (parameter, value) that differ from defaults
    previous: uuid.UUID | None  # the visitor's run of this lab just before this one

    @property
    def prediction(self) -> object:
        return self.job.params.get("_prediction") if self.job.params else None


def lab_runs_recent(*, slug: str, visitor: str, limit: int = 10) -> list[RunRow]:
    """Return the visitor's latest runs of ``slug``, newest first."""
    lab = LABS.get(slug)
    defaults = lab.defaults() if lab is not None else {}
    runs = list(
        LabRun.objects.filter(visitor=visitor, slug=slug)
        .select_related("job")
        .order_by("-created_at")[: limit + 1]
    )
    return [
        RunRow(
            job=run.job,
            live=run.live,
            changed=_changed(run.job.params, defaults),
            previous=runs[i + 1].job_id if i + 1 < len(runs) else None,
        )
        for i, run in enumerate(runs[:limit])
    ]


def _changed(
    params: object, defaults: Mapping[str, object]
) -> tuple[tuple[str, str], ...]:
    values = params if isinstance(params, dict) else {}
    return tuple(
        (name, param_text(values[name]))
        for name in defaults
        if name in values and values[name] != defaults[name]
    )


def param_text(value: object) -> str:
    """Return a parameter's value as the form shows it (lists comma-separated)."""
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "none"
    return str(value)


@dataclass(frozen=True)
class LivePlace:
    """Where a queued live run stands: runs ahead of it and a rough wait."""

    ahead: int
    wait_s: int | None


def live_run_place(*, job: JobStatus, queue_ids: list[str]) -> LivePlace | None:
    """Return the queued live run's place, from the live queue's job ids in order.

    Runs ahead are the queued ones before it plus any live run running now; the wait
    (until it starts) is that many times the mean of the last ten finished live runs.
    """
    rq_id = f"lab-{job.id}"
    if job.state != JobStatus.State.QUEUED or rq_id not in queue_ids:
        return None
    running = LabRun.objects.filter(live=True, job__state=JobStatus.State.RUNNING)
    ahead = queue_ids.index(rq_id) + running.count()
    recent = list(
        LabRun.objects.filter(
            live=True,
            job__state=JobStatus.State.DONE,
            job__started_at__isnull=False,
            job__finished_at__isnull=False,
        )
        .order_by("-created_at")
        .values_list("job__started_at", "job__finished_at")[:10]
    )
    seconds = [
        (end - start).total_seconds()
        for start, end in recent
        if start is not None and end is not None
    ]
    if not seconds:
        return LivePlace(ahead=ahead, wait_s=None)
    mean = sum(seconds) / len(seconds)
    return LivePlace(ahead=ahead, wait_s=round(mean * ahead))
