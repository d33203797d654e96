"""Writes of a learner's challenges: answers counted, hints opened, solved kept.

Each function owns its transaction. An anonymous visitor's challenges live in their
session (``course.visitors.session_challenge_note``) and come here on sign-up or
sign-in through :func:`challenges_adopt`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from course.challenges.selectors import ChallengeState, session_states
from course.challenges.spec import ID
from course.models import ChallengeProgress

SLUG = re.compile(r"^[a-z0-9-]{1,80}$")


def _row(*, user_id: int, slug: str, challenge: str) -> ChallengeProgress:
    """Return the learner's row for one challenge, locked; call inside atomic()."""
    ChallengeProgress.objects.get_or_create(
        user_id=user_id, slug=slug, challenge=challenge
    )
    return ChallengeProgress.objects.select_for_update().get(
        user_id=user_id, slug=slug, challenge=challenge
    )


def _state(row: ChallengeProgress) -> ChallengeState:
    answer = row.answer if isinstance(row.answer, dict) else {}
    return ChallengeState(
        attempts=row.attempts,
        hints=row.hints,
        solved=row.solved_at is not None,
        answer={str(k): str(v) for k, v in answer.items()},
        live_confirmed=row.live_confirmed_at is not None,
    )


def challenge_attempt(
    *,
    user_id: int,
    slug: str,
    challenge: str,
    solved_answer: Mapping[str, str] | None,
) -> ChallengeState:
    """Count one answer; the first right one (``solved_answer``) solves it for good."""
    with transaction.atomic():
        row = _row(user_id=user_id, slug=slug, challenge=challenge)
        row.attempts += 1
        if solved_answer is not None and row.solved_at is None:
            row.solved_at = timezone.now()
            row.answer = dict(solved_answer)
        row.save(update_fields=["attempts", "solved_at", "answer", "updated_at"])
        return _state(row)


def challenge_hint(
    *, user_id: int, slug: str, challenge: str, total: int
) -> ChallengeState:
    """Open the challenge's next hint for the learner (no further than ``total``)."""
    with transaction.atomic():
        row = _row(user_id=user_id, slug=slug, challenge=challenge)
        if row.hints < total:
            row.hints += 1
            row.save(update_fields=["hints", "updated_at"])
        return _state(row)


def challenge_live_confirm(
    *, user_id: int, slug: str, challenge: str, job_id: uuid.UUID
) -> bool:
    """Record that live run ``job_id`` met every live condition of the learner's
    solved challenge; return whether this call recorded it.

    Only the first confirming run is kept: the update is a compare-and-set on the
    empty field, so two page views seeing the same finished run record it once.
    """
    now = timezone.now()
    with transaction.atomic():
        updated = ChallengeProgress.objects.filter(
            user_id=user_id,
            slug=slug,
            challenge=challenge,
            solved_at__isnull=False,
            live_confirmed_at__isnull=True,
        ).update(live_confirmed_at=now, live_run=job_id, updated_at=now)
    return updated == 1


def challenges_adopt(*, user_id: int, progress: Mapping[str, Mapping[str, Any]]) -> int:
    """Merge a visitor's session challenges into the account; return how many.

    Attempts add up, the hints opened are the more of the two, and a challenge
    solved in either stays solved (the account's answer wins, if it has one).
    Runs in the caller's transaction when there is one (``learner_adopt``).
    """
    merged = 0
    with transaction.atomic():
        for slug, entry in progress.items():
            for challenge, state in session_states(entry).items():
                if not (state.attempts or state.hints or state.solved):
                    continue
                if not ID.match(challenge) or not SLUG.match(slug):
                    continue  # not one of ours: a session someone edited
                row = _row(user_id=user_id, slug=slug, challenge=challenge)
                row.attempts += state.attempts
                row.hints = max(row.hints, state.hints)
                if state.solved and row.solved_at is None:
                    row.solved_at = timezone.now()
                    row.answer = dict(state.answer)
                row.save()
                merged += 1
    return merged
