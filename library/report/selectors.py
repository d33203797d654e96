"""Reads of the report's JobStatus rows (the rows of kind ``REPORT_KIND``)."""

from __future__ import annotations

import uuid

from django.http import HttpRequest

from jobs.models import JobStatus
from library.permissions import RUN_REPORT, user_may
from library.report.scope import REPORT_KIND


def report_get(*, job_id: uuid.UUID) -> JobStatus | None:
    return (
        JobStatus.objects.select_related("created_by")
        .filter(pk=job_id, kind=REPORT_KIND)
        .first()
    )


def report_recent(*, limit: int = 10) -> list[JobStatus]:
    """Return the newest reports, newest first."""
    return list(
        JobStatus.objects.select_related("created_by")
        .filter(kind=REPORT_KIND)
        .order_by("-created_at")[:limit]
    )


def report_readable(job: JobStatus, request: HttpRequest) -> bool:
    """Let holders of the report right read any report (``jobs.access``).

    Its starter may anyway; being staff is not enough, as for starting one.
    """
    return user_may(request.user, RUN_REPORT)
