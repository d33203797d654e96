"""Reads of JobStatus."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from django.utils import timezone

from jobs.models import JobStatus
from jobs.resumable import resumable_kinds


def jobstatus_payload(job: JobStatus) -> dict[str, Any]:
    """Return the JSON shape that status pages and pollers read."""
    return {
        "id": str(job.id),
        "kind": job.kind,
        "name": job.name,
        "state": job.state,
        "progress": round(job.progress, 1),
        "message": job.message,
        "version": job.version,
        "finished": job.is_finished,
        "result": job.result,
        "error": job.error,
        "params": job.params,
        # Long jobs with a checkpoint (the loan report): how far, and why it stopped.
        "processed": _checkpoint_processed(job),
        "total": _params_total(job),
        "cancel_requested": job.cancel_requested_at is not None,
        "cancel_reason": job.cancel_reason,
        "resumable": jobstatus_resumable(job),
    }


def _checkpoint_processed(job: JobStatus) -> int | None:
    checkpoint = job.checkpoint
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("processed"), int):
        return int(checkpoint["processed"])
    return None


def _params_total(job: JobStatus) -> int | None:
    params = job.params
    if isinstance(params, dict) and isinstance(params.get("total"), int):
        return int(params["total"])
    return None


def jobstatus_resumable(
    job: JobStatus, *, now: datetime.datetime | None = None
) -> bool:
    """Return whether the job may be enqueued again from its checkpoint.

    Only a kind registered as resumable (jobs.resumable, e.g. the monthly loan
    report) keeps a checkpoint. Cancelled jobs of such a kind are; so is a running
    one whose lease ran out (its worker died without a word).
    """
    if job.kind not in resumable_kinds():
        return False
    if job.state == JobStatus.State.CANCELLED:
        return True
    now = now or timezone.now()
    return (
        job.state == JobStatus.State.RUNNING
        and job.leased_until is not None
        and job.leased_until < now
    )


def jobstatus_get(*, job_id: uuid.UUID) -> JobStatus | None:
    """Return the job, or None for an unknown id."""
    return JobStatus.objects.filter(pk=job_id).first()
