"""Writes to JobStatus. Progress is durable first, announced second."""

from __future__ import annotations

import datetime
import uuid
from enum import StrEnum
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import models, transaction
from django.db.models import F
from django.db.models.functions import Coalesce
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


def jobstatus_waiting_note(*, job_id: uuid.UUID, message: str) -> bool:
    """Describe a queued job's wait (its place in line); a started job is left alone.

    True when the row changed (its version moves, so followers hear of it).
    """
    message = message[:200]
    with transaction.atomic():
        changed = (
            JobStatus.objects.filter(pk=job_id, state=JobStatus.State.QUEUED)
            .exclude(message=message)
            .update(version=F("version") + 1, message=message)
        )
    return changed == 1


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


# --- cooperative cancellation, leases and checkpoints (long jobs) --------------------
#
# A long job holds a lease on its row (``lease_owner``, ``leased_until``) and renews it
# with every checkpoint. Every write of the holder is conditioned on still being the
# owner, so a holder that stalled past its lease and was replaced cannot overwrite
# the newer run's checkpoint (compare-and-set, checked by the row count).


# The reason an operator's cancel records (the admin's "Cancel selected"), followed
# by who asked: "cancelled by an operator (ada)".
REASON_OPERATOR = "cancelled by an operator"


class CancelOutcome(StrEnum):
    """What a cancel request did to the row (shown to users)."""

    CANCELLED = "cancelled"  # it was still queued: nobody runs it, cancelled at once
    REQUESTED = "requested"  # it is running: it stops at its next chunk boundary
    ALREADY = "already requested"
    FINISHED = "finished"  # nothing left to cancel


def jobstatus_cancel_request(*, job_id: uuid.UUID, reason: str) -> CancelOutcome:
    """Ask the job to stop; return one of the CancelOutcome values.

    A queued job is cancelled outright (the worker's claim, conditioned on
    ``queued``, then finds nothing); a running one gets a request it reads at its
    next chunk boundary. Raises JobStatus.DoesNotExist for an unknown id.
    """
    now = timezone.now()
    reason = reason[:100]
    with transaction.atomic():
        if JobStatus.objects.filter(pk=job_id, state=JobStatus.State.QUEUED).update(
            state=JobStatus.State.CANCELLED,
            cancel_requested_at=now,
            cancel_reason=reason,
            message=f"cancelled before it started: {reason}"[:200],
            finished_at=now,
            version=F("version") + 1,
        ):
            return CancelOutcome.CANCELLED
        if JobStatus.objects.filter(
            pk=job_id, state=JobStatus.State.RUNNING, cancel_requested_at__isnull=True
        ).update(
            cancel_requested_at=now, cancel_reason=reason, version=F("version") + 1
        ):
            return CancelOutcome.REQUESTED
        job = JobStatus.objects.get(pk=job_id)
    if job.state == JobStatus.State.RUNNING:
        return CancelOutcome.ALREADY
    return CancelOutcome.FINISHED


def jobstatus_claim(
    *, job_id: uuid.UUID, owner: str, lease_s: float, message: str = "running"
) -> JobStatus | None:
    """Take the job's lease and mark it running; return the row, or None.

    Claimable: a queued row, or a running row whose lease has run out (its holder
    died or stalled). A cancelled or finished row is never claimed, so a second
    delivery of the same rq job does nothing.
    """
    now = timezone.now()
    with transaction.atomic():
        claimable = JobStatus.objects.filter(pk=job_id).filter(
            models.Q(state=JobStatus.State.QUEUED)
            | models.Q(state=JobStatus.State.RUNNING, leased_until__lt=now)
        )
        claimed = claimable.update(
            state=JobStatus.State.RUNNING,
            lease_owner=owner[:100],
            leased_until=now + datetime.timedelta(seconds=lease_s),
            started_at=Coalesce(F("started_at"), now),
            message=message[:200],
            version=F("version") + 1,
        )
        if claimed != 1:
            return None
        return JobStatus.objects.get(pk=job_id)


def _owned(job_id: uuid.UUID, owner: str) -> models.QuerySet[JobStatus]:
    return JobStatus.objects.filter(
        pk=job_id, state=JobStatus.State.RUNNING, lease_owner=owner
    )


def jobstatus_checkpoint(
    *,
    job_id: uuid.UUID,
    owner: str,
    checkpoint: dict[str, Any],
    progress: float,
    message: str,
    lease_s: float,
) -> bool:
    """Store checkpoint and progress and renew the lease, in one UPDATE.

    Return False (and write nothing) when ``owner`` no longer holds the job: its
    lease was taken over, or the row left ``running``.
    """
    with transaction.atomic():
        written = _owned(job_id, owner).update(
            checkpoint=checkpoint,
            progress=max(0.0, min(100.0, progress)),
            message=message[:200],
            leased_until=timezone.now() + datetime.timedelta(seconds=lease_s),
            version=F("version") + 1,
        )
    return written == 1


def _owned_end(job_id: uuid.UUID, owner: str, **fields: Any) -> bool:
    """End the owner's job with ``fields`` (its final state and what goes with it)
    and drop the lease; False when ``owner`` no longer holds it."""
    with transaction.atomic():
        ended = _owned(job_id, owner).update(
            lease_owner="",
            leased_until=None,
            finished_at=timezone.now(),
            version=F("version") + 1,
            **fields,
        )
    return ended == 1


def jobstatus_stop(*, job_id: uuid.UUID, owner: str, reason: str) -> bool:
    """Mark the owner's job cancelled at its last checkpoint and drop the lease."""
    return _owned_end(
        job_id,
        owner,
        state=JobStatus.State.CANCELLED,
        cancel_reason=reason[:100],
        cancel_requested_at=Coalesce(F("cancel_requested_at"), timezone.now()),
        message=f"cancelled: {reason}"[:200],
    )


def jobstatus_complete(
    *,
    job_id: uuid.UUID,
    owner: str,
    checkpoint: dict[str, Any] | None,
    result: dict[str, Any],
) -> bool:
    """Mark the owner's job done with its last checkpoint and result."""
    return _owned_end(
        job_id,
        owner,
        state=JobStatus.State.DONE,
        checkpoint=checkpoint,
        progress=100.0,
        message="finished",
        result=result,
    )


def jobstatus_requeue(*, job_id: uuid.UUID, kind: str, message: str) -> bool:
    """Put a cancelled (or abandoned: running, lease run out) job back in the queue.

    The checkpoint stays: the next claim continues from it. The caller enqueues the
    rq job in the same transaction (sent after commit). False when not resumable.
    """
    now = timezone.now()
    with transaction.atomic():
        requeued = (
            JobStatus.objects.filter(pk=job_id, kind=kind)
            .filter(
                models.Q(state=JobStatus.State.CANCELLED)
                | models.Q(state=JobStatus.State.RUNNING, leased_until__lt=now)
            )
            .update(
                state=JobStatus.State.QUEUED,
                cancel_requested_at=None,
                cancel_reason="",
                lease_owner="",
                leased_until=None,
                finished_at=None,
                message=message[:200],
                version=F("version") + 1,
            )
        )
    return requeued == 1


# --- a lease holder's other writes (the lab service's runs) --------------------------


def jobstatus_report(
    *, job_id: uuid.UUID, owner: str, progress: float, message: str
) -> bool:
    """Store the owner's progress (0..100) and step; False once it lost the job."""
    with transaction.atomic():
        written = _owned(job_id, owner).update(
            progress=max(0.0, min(100.0, progress)),
            message=message[:200],
            version=F("version") + 1,
        )
    return written == 1


def jobstatus_fail_owned(*, job_id: uuid.UUID, owner: str, error: str) -> bool:
    """Mark the owner's job failed with a one-line reason and drop the lease."""
    return _owned_end(
        job_id,
        owner,
        state=JobStatus.State.FAILED,
        message="failed",
        error=error[:4000],
    )


def jobstatus_release(*, job_id: uuid.UUID, owner: str, message: str) -> bool:
    """Put the owner's running job back in the queue, untouched, as if never taken.

    For a worker that stops before the job could finish: another worker runs it
    from the start.
    """
    with transaction.atomic():
        released = _owned(job_id, owner).update(
            state=JobStatus.State.QUEUED,
            progress=0.0,
            message=message[:200],
            lease_owner="",
            leased_until=None,
            started_at=None,
            version=F("version") + 1,
        )
    return released == 1


def jobstatus_leases_renew(*, kind: str, owner: str, lease_s: float) -> int:
    """Extend every lease ``owner`` holds on running jobs of ``kind``; return how many.

    A heartbeat, not a change a follower needs to hear of: the version stays.
    """
    until = timezone.now() + datetime.timedelta(seconds=lease_s)
    with transaction.atomic():
        return JobStatus.objects.filter(
            kind=kind, state=JobStatus.State.RUNNING, lease_owner=owner
        ).update(leased_until=until)


def jobstatus_leases_expire(
    *, kind: str, error: str, now: datetime.datetime | None = None
) -> list[uuid.UUID]:
    """Fail the running jobs of ``kind`` whose lease ran out; return their ids.

    Their holder stopped renewing (killed, or stalled past the lease): nobody will
    finish them, so they end now with ``error`` instead of "running" for ever.
    """
    now = now or timezone.now()
    with transaction.atomic():
        expired = list(
            JobStatus.objects.select_for_update(skip_locked=True)
            .filter(kind=kind, state=JobStatus.State.RUNNING, leased_until__lt=now)
            .values_list("pk", flat=True)
        )
        JobStatus.objects.filter(
            pk__in=expired, state=JobStatus.State.RUNNING, leased_until__lt=now
        ).update(
            state=JobStatus.State.FAILED,
            message="failed",
            error=error[:4000],
            lease_owner="",
            leased_until=None,
            finished_at=now,
            version=F("version") + 1,
        )
    return expired
