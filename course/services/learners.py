"""A learner's progress, what carries over into their account, and deleting it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from course.challenges.services import challenges_adopt
from course.models import AccountDeletion, LabRun, LessonProgress
from course.selectors import PREDICTION_KEY
from course.visitors import progress_entry
from jobs.models import JobStatus
from library.models import Member


class AccountError(Exception):
    """The account cannot be deleted this way; the message says why."""


def _progress_row(*, user_id: int, slug: str) -> LessonProgress:
    """Return the learner's row for ``slug``, locked; call inside ``atomic()``."""
    LessonProgress.objects.get_or_create(user_id=user_id, slug=slug)
    return LessonProgress.objects.select_for_update().get(user_id=user_id, slug=slug)


def progress_mark_read(*, user_id: int, slug: str) -> LessonProgress:
    """Record that the learner has read the lesson (the first time counts)."""
    with transaction.atomic():
        row = _progress_row(user_id=user_id, slug=slug)
        if row.read_at is None:
            row.read_at = timezone.now()
            row.save(update_fields=["read_at", "updated_at"])
    return row


def progress_answer(*, user_id: int, slug: str, question: int) -> LessonProgress:
    """Record that the learner opened the answer to ``question`` (0-based, once)."""
    with transaction.atomic():
        row = _progress_row(user_id=user_id, slug=slug)
        answered = [n for n in row.answered if isinstance(n, int)]
        if question not in answered:
            row.answered = sorted([*answered, question])
            row.save(update_fields=["answered", "updated_at"])
    return row


def progress_lab_run(*, user_id: int, slug: str, runs: int = 1) -> None:
    """Count lab runs the learner started for the lesson."""
    with transaction.atomic():
        _progress_row(user_id=user_id, slug=slug)
        LessonProgress.objects.filter(user_id=user_id, slug=slug).update(
            lab_runs=F("lab_runs") + runs, updated_at=timezone.now()
        )


@dataclass(frozen=True)
class Adopted:
    runs: int
    lessons: int
    challenges: int = 0


def learner_adopt(
    *, user_id: int, visitor: str, progress: Mapping[str, Mapping[str, Any]]
) -> Adopted:
    """Carry an anonymous visitor's runs and progress into the learner's account.

    ``visitor`` is the session's ``anon:…`` name and ``progress`` the session's
    progress per lesson. Runs change owner; progress merges with what the account
    has (read stays read, answers add up, runs are counted). Safe to repeat: the
    runs already moved are not found again, and the caller clears the session.
    The visitor's challenges (answers, hints, solved) merge as well.
    """
    owner = f"user:{user_id}"
    now = timezone.now()
    with transaction.atomic():
        runs = 0
        if visitor.startswith("anon:"):
            moved = list(
                LabRun.objects.filter(visitor=visitor).values_list("pk", flat=True)
            )
            runs = LabRun.objects.filter(pk__in=moved).update(visitor=owner)
            JobStatus.objects.filter(pk__in=moved, created_by__isnull=True).update(
                created_by_id=user_id
            )
        lessons = 0
        challenges = challenges_adopt(user_id=user_id, progress=progress)
        for slug, entry in progress.items():
            read, answered, lab_runs = progress_entry(entry)
            if not (read or answered or lab_runs):
                continue
            row = _progress_row(user_id=user_id, slug=slug)
            if read and row.read_at is None:
                row.read_at = now
            known = {n for n in row.answered if isinstance(n, int)}
            row.answered = sorted(known | answered)
            row.lab_runs += lab_runs
            row.save(update_fields=["read_at", "answered", "lab_runs", "updated_at"])
            lessons += 1
    return Adopted(runs=runs, lessons=lessons, challenges=challenges)


def account_delete(*, user_id: int) -> AccountDeletion:
    """Delete a learner's account with its runs, predictions and progress, now.

    A run still in flight that other learners joined is kept for them, with
    nothing left that names its owner (no record owner, no prediction, no creator).
    A library member's loan history stays the library's; the member is only
    unlinked from the account. The audit row holds counts, no personal data.
    Staff accounts are refused: another operator removes them in the admin.
    """
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        raise AccountError("No such account.")
    if user.is_staff or user.is_superuser:
        raise AccountError(
            "An operator account is not deleted from here: another operator "
            "removes it in the admin."
        )
    owner = f"user:{user_id}"
    with transaction.atomic():
        runs = LabRun.objects.filter(visitor=owner)
        job_ids = list(runs.values_list("pk", flat=True))
        predictions = JobStatus.objects.filter(
            pk__in=job_ids, params__has_key=PREDICTION_KEY
        ).count()
        shared = list(
            JobStatus.objects.filter(
                pk__in=job_ids,
                state__in=(JobStatus.State.QUEUED, JobStatus.State.RUNNING),
            )
            .filter(joined_runs__isnull=False)
            .distinct()
            .values_list("pk", flat=True)
        )
        _anonymise_shared(shared)
        JobStatus.objects.filter(pk__in=job_ids).exclude(pk__in=shared).delete()
        progress_rows = LessonProgress.objects.filter(user_id=user_id).count()
        addresses = EmailAddress.objects.filter(user_id=user_id).count()
        member_unlinked = Member.objects.filter(user_id=user_id).exists()
        user.delete()
        return AccountDeletion.objects.create(
            lab_runs=len(job_ids),
            predictions=predictions,
            progress_rows=progress_rows,
            email_addresses=addresses,
            member_unlinked=member_unlinked,
        )


def _anonymise_shared(job_ids: list[Any]) -> None:
    """Strip the owner from runs other learners are still following."""
    if not job_ids:
        return
    LabRun.objects.filter(pk__in=job_ids).update(visitor="deleted", client="")
    for job in JobStatus.objects.filter(pk__in=job_ids).filter(
        Q(params__has_key=PREDICTION_KEY) | Q(created_by__isnull=False)
    ):
        params = dict(job.params) if isinstance(job.params, dict) else {}
        params.pop(PREDICTION_KEY, None)
        JobStatus.objects.filter(pk=job.pk).update(params=params, created_by=None)


def sessions_clear_expired() -> None:
    """Delete expired sessions, as ``manage.py clearsessions`` does."""
    engine = import_module(settings.SESSION_ENGINE)
    engine.SessionStore.clear_expired()
