"""Writes to JobStatus. Progress is durable first, announced second."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from jobs.models import JobStatus


def jobstatus_create(
    *,
    kind: str,
    name: str,
    params: dict[str, Any],
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> JobStatus:
    """Record a queued job; the caller enqueues it (after commit)."""
    created_by = user if isinstance(user, User) else None
    return JobStatus.objects.create(
        kind=kind, name=name, params=params, created_by=created_by
    )


def _bump(job_id: uuid.UUID, **fields: Any) -> int:
    with transaction.atomic():
        return (
            JobStatus.objects.filter(pk=job_id)
            .exclude(state__in=JobStatus.FINISHED)
            .update(version=F("version") + 1, **fields)
        )


def jobstatus_start(*, job_id: uuid.UUID) -> bool:
    """Mark the job running; False when it was finished or cancelled meanwhile."""
    return _bump(job_id, state=JobStatus.State.RUNNING, started_at=timezone.now()) == 1


def jobstatus_progress(
    *, job_id: uuid.UUID, progress: float, message: str = ""
) -> None:
    """Store progress (0..100) and a short description of the current step."""
    _bump(job_id, progress=max(0.0, min(100.0, progress)), message=message[:200])


def jobstatus_finish(*, job_id: uuid.UUID, result: dict[str, Any]) -> None:
    _bump(
        job_id,
        state=JobStatus.State.DONE,
        progress=100.0,
        message="finished",
        result=result,
        finished_at=timezone.now(),
    )


def jobstatus_fail(*, job_id: uuid.UUID, error: str) -> None:
    _bump(
        job_id,
        state=JobStatus.State.FAILED,
        message="failed",
        error=error[:4000],
        finished_at=timezone.now(),
    )


def jobstatus_prune(*, older_than_days: int) -> int:
    """Delete finished job statuses older than ``older_than_days``; return the count."""
    cutoff = timezone.now() - datetime.timedelta(days=older_than_days)
    with transaction.atomic():
        deleted, _ = JobStatus.objects.filter(
            state__in=JobStatus.FINISHED, finished_at__lt=cutoff
        ).delete()
    return deleted
