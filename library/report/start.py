"""Starting, cancelling and resuming a report."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import django_rq
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from jobs.models import JobStatus
from jobs.services import (
    CancelOutcome,
    jobstatus_cancel_request,
    jobstatus_create,
    jobstatus_requeue,
)
from library.models import Branch
from library.report.run import report_run
from library.report.scope import (
    ALL_MONTHS,
    DEFAULT_CHUNK,
    MAX_CHUNK,
    MAX_PAUSE_MS,
    REPORT_KIND,
    REPORT_NAME,
    REPORT_QUEUE,
    RQ_TIMEOUT_S,
    ReportError,
    ReportParams,
    checkpoint_of,
    loans_in_scope,
    month_bounds,
    previous_month,
)


def _enqueue(job: JobStatus, queue: Any) -> None:
    target = queue if queue is not None else django_rq.get_queue(REPORT_QUEUE)
    # A fresh rq id per attempt: a resumed report is a new delivery of the same row.
    target.enqueue(
        report_run,
        str(job.id),
        job_id=f"report-{job.id}-{uuid.uuid4().hex[:6]}",
        description=f"{REPORT_NAME} {job.params.get('month', '')}",
        job_timeout=RQ_TIMEOUT_S,
        result_ttl=3600,
        failure_ttl=24 * 3600,
    )


def monthly_report_start(
    *,
    user: AbstractBaseUser | AnonymousUser | None = None,
    month: str | None = None,
    branch: int | None = None,
    chunk: int = DEFAULT_CHUNK,
    time_limit_s: float | None = None,
    pause_ms: int = 0,
    queue: Any = None,
) -> JobStatus:
    """Record a monthly loan report and enqueue it; return its JobStatus row.

    ``month`` is "YYYY-MM", "all", or None for the month before today (what the
    monthly scheduler wants). ``pause_ms`` waits after each chunk, so a short report
    can be followed (and cancelled) by eye; ``queue`` is an rq Queue to use instead
    of ``default`` (the live lab's private queue). Raises ReportError.
    """
    today = timezone.localdate()
    month = previous_month(today) if month is None else month.strip()
    # Open loans count their days up to the month's end (or today, if sooner).
    as_of = today if month == ALL_MONTHS else min(month_bounds(month)[1], today)
    if not 1 <= chunk <= MAX_CHUNK:
        raise ReportError(f"chunk must be between 1 and {MAX_CHUNK}")
    if time_limit_s is not None and time_limit_s <= 0:
        raise ReportError("the time limit must be more than 0 seconds")
    if not 0 <= pause_ms <= MAX_PAUSE_MS:
        raise ReportError(f"the pause must be between 0 and {MAX_PAUSE_MS} ms")
    if branch is not None and not Branch.objects.filter(pk=branch).exists():
        raise ReportError(f"there is no branch {branch}")
    params: ReportParams = {
        "month": month,
        "branch": branch,
        "as_of": as_of.isoformat(),
        "total": loans_in_scope(month, branch).count(),
        "chunk": chunk,
        "time_limit_s": time_limit_s,
        "pause_ms": pause_ms,
    }
    with transaction.atomic():
        job = jobstatus_create(
            kind=REPORT_KIND, name=REPORT_NAME, params=dict(params), user=user
        )
        _enqueue(job, queue)  # sent after commit (COMMIT_MODE "on_db_commit")
    return job


def report_cancel(*, job_id: uuid.UUID, reason: str) -> CancelOutcome:
    """Ask a report to stop (page button, admin action): jobstatus_cancel_request."""
    return jobstatus_cancel_request(job_id=job_id, reason=reason)


def report_resume(*, job_id: uuid.UUID, queue: Any = None) -> JobStatus:
    """Enqueue a cancelled (or abandoned) report again; it continues at its checkpoint.

    Raises ReportError when the report is not resumable.
    """
    with transaction.atomic():
        job = JobStatus.objects.filter(pk=job_id, kind=REPORT_KIND).first()
        if job is None:
            raise ReportError("no such report")
        processed = checkpoint_of(job)["processed"]
        total = int(job.params.get("total", 0))
        if not jobstatus_requeue(
            job_id=job_id,
            kind=REPORT_KIND,
            message=f"resuming at {processed:,} of {total:,} loans",
        ):
            raise ReportError(f"a {job.state} report cannot be resumed")
        job.refresh_from_db()
        _enqueue(job, queue)
    return job


# --- the scheduled run (library.periodic) ---------------------------------------------


def report_month(slot: datetime.datetime) -> str:
    """Return "YYYY-MM" of the month before the slot's UTC day: the month reported."""
    last_day = slot.astimezone(datetime.UTC).date().replace(day=1) - datetime.timedelta(
        days=1
    )
    return f"{last_day.year:04d}-{last_day.month:02d}"


def monthly_report_start_for_slot(*, slot: datetime.datetime) -> str:
    """Start the report of the month before ``slot``; return its JobStatus id.

    The month comes from the slot, not from today, so a caught-up run reports the
    month it was due for. It records the report's JobStatus and enqueues the long
    job, which guards itself with its own lease. A whole-library report of that
    month already waiting, running or done is the answer instead: an operator's
    "run now" beside the scheduled slot must not make two of the same month.
    """
    month = report_month(slot)
    with transaction.atomic():
        existing = (
            JobStatus.objects.select_for_update()
            .filter(
                kind=REPORT_KIND,
                params__month=month,
                params__branch=None,
                state__in=(
                    JobStatus.State.QUEUED,
                    JobStatus.State.RUNNING,
                    JobStatus.State.DONE,
                ),
            )
            .order_by("created_at")
            .first()
        )
        if existing is not None:
            return str(existing.pk)
        job = monthly_report_start(month=month)
    return str(job.pk)
