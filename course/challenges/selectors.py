"""Reads of a learner's challenges: from their account, or from their session."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from course.models import ChallengeProgress, LabRun
from course.visitors import challenge_entries
from jobs.models import JobStatus

# How many of a learner's newest live runs of one lesson are read for the page's
# live checks: enough for every challenge's latest pair, however many reruns.
LIVE_RUNS_READ = 50


@dataclass(frozen=True)
class ChallengeState:
    """Where a learner stands with one challenge."""

    attempts: int = 0
    hints: int = 0
    solved: bool = False
    answer: Mapping[str, str] = field(default_factory=dict)
    # A live run of the solved answer met every live condition (accounts only).
    live_confirmed: bool = False


NOT_STARTED = ChallengeState()


def _count(raw: object) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 0


def _answer(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


def state_of_entry(raw: Mapping[str, Any]) -> ChallengeState:
    """Return one challenge's state as the session keeps it."""
    return ChallengeState(
        attempts=_count(raw.get("attempts")),
        hints=_count(raw.get("hints")),
        solved=raw.get("solved") is True,
        answer=_answer(raw.get("answer")),
    )


def session_states(entry: Mapping[str, Any]) -> dict[str, ChallengeState]:
    """Return the challenges of one lesson's session progress entry."""
    return {cid: state_of_entry(raw) for cid, raw in challenge_entries(entry).items()}


def session_solved(entry: Mapping[str, Any]) -> frozenset[str]:
    """Return the ids a visitor solved, from one lesson's session progress entry."""
    return frozenset(cid for cid, s in session_states(entry).items() if s.solved)


def challenge_states(*, user_id: int, slug: str) -> dict[str, ChallengeState]:
    """Return the learner's state of every challenge of ``slug`` they touched."""
    return {
        row.challenge: ChallengeState(
            attempts=row.attempts,
            hints=row.hints,
            solved=row.solved_at is not None,
            answer=_answer(row.answer),
            live_confirmed=row.live_confirmed_at is not None,
        )
        for row in ChallengeProgress.objects.filter(user_id=user_id, slug=slug)
    }


def challenges_solved(*, user_id: int, slug: str) -> frozenset[str]:
    """Return the ids of the challenges of ``slug`` the learner solved."""
    return frozenset(
        ChallengeProgress.objects.filter(
            user_id=user_id, slug=slug, solved_at__isnull=False
        ).values_list("challenge", flat=True)
    )


def challenges_solved_by_slug(*, user_id: int) -> dict[str, frozenset[str]]:
    """Return the ids of the challenges the learner solved, per lesson."""
    return _by_slug(user_id, solved_at__isnull=False)


def challenges_confirmed_by_slug(*, user_id: int) -> dict[str, frozenset[str]]:
    """Return the ids of the challenges a live run confirmed, per lesson."""
    return _by_slug(user_id, live_confirmed_at__isnull=False)


def _by_slug(user_id: int, **done: bool) -> dict[str, frozenset[str]]:
    found: defaultdict[str, set[str]] = defaultdict(set)
    rows = ChallengeProgress.objects.filter(user_id=user_id, **done)
    for slug, challenge in rows.values_list("slug", "challenge"):
        found[slug].add(challenge)
    return {slug: frozenset(ids) for slug, ids in found.items()}


@dataclass(frozen=True)
class LiveRuns:
    """A learner's live runs of one parameter set: the newest still waiting or
    running, and the newest that finished (either may be None)."""

    pending: JobStatus | None = None
    finished: JobStatus | None = None


NO_LIVE_RUNS = LiveRuns()


def live_runs_of(
    *, visitor: str, slug: str, fingerprints: Collection[str]
) -> dict[str, LiveRuns]:
    """Return the learner's live runs of ``slug`` per fingerprint asked for.

    A fingerprint names the lab, every parameter and the live part
    (``course.policies.run_fingerprint``), so a run found here ran exactly those
    settings, whichever page asked for it.
    """
    if not visitor or not fingerprints:
        return {}
    found: dict[str, LiveRuns] = {}
    rows = (
        LabRun.objects.filter(
            visitor=visitor, slug=slug, live=True, fingerprint__in=list(fingerprints)
        )
        .select_related("job")
        .order_by("-created_at")[:LIVE_RUNS_READ]
    )
    for run in rows:
        runs = found.get(run.fingerprint, NO_LIVE_RUNS)
        if run.job.is_finished:
            if runs.finished is None:
                runs = replace(runs, finished=run.job)
        elif runs.pending is None:
            runs = replace(runs, pending=run.job)
        found[run.fingerprint] = runs
    return found
