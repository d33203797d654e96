"""Reading drills: a learner's open one, their latest of a kind, the site's count."""

from __future__ import annotations

import datetime
import uuid

from course.drills.state import DRILL_KIND
from jobs.models import JobStatus

_OPEN = (JobStatus.State.QUEUED, JobStatus.State.RUNNING)


def drill_open_of(*, user_id: int) -> JobStatus | None:
    """Return the learner's open drill (queued or running), if any."""
    return (
        JobStatus.objects.filter(
            kind=DRILL_KIND, created_by_id=user_id, state__in=_OPEN
        )
        .order_by("-created_at")
        .first()
    )


def drill_latest_of(*, user_id: int, slug: str) -> JobStatus | None:
    """Return the learner's latest drill of ``slug``, open or finished."""
    return (
        JobStatus.objects.filter(kind=DRILL_KIND, created_by_id=user_id, name=slug)
        .order_by("-created_at")
        .first()
    )


def drill_of(*, job_id: uuid.UUID, user_id: int) -> JobStatus | None:
    """Return the learner's drill ``job_id``; None when it is not theirs."""
    return JobStatus.objects.filter(
        pk=job_id, kind=DRILL_KIND, created_by_id=user_id
    ).first()


def drills_open_count() -> int:
    return JobStatus.objects.filter(kind=DRILL_KIND, state__in=_OPEN).count()


def drills_started_since(*, user_id: int, since: datetime.datetime) -> int:
    return JobStatus.objects.filter(
        kind=DRILL_KIND, created_by_id=user_id, created_at__gte=since
    ).count()


def drills_passed_of(*, user_id: int) -> set[str]:
    """Return the slugs of the drills the learner has passed at least once."""
    rows = JobStatus.objects.filter(kind=DRILL_KIND, created_by_id=user_id).values_list(
        "name", "result"
    )
    return {
        name
        for name, result in rows
        if isinstance(result, dict) and result.get("passed_ever")
    }
