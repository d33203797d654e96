"""Reads for the course pages."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from django.db.models import Max, Sum

from course.challenges.selectors import (
    challenges_confirmed_by_slug,
    challenges_solved,
    challenges_solved_by_slug,
    session_solved,
)
from course.models import LabAllowance, LabRun, LabWorkerState, LessonProgress
from course.policies import Spent, Usage, Waiting, fair_owner
from course.visitors import progress_entry
from jobs.models import JobStatus

LAB_JOB_KIND = "lab"


def lab_job_get(*, job_id: uuid.UUID) -> JobStatus | None:
    """Return the lab run with ``job_id``, or None (unknown id, or not a lab run)."""
    return JobStatus.objects.filter(pk=job_id, kind=LAB_JOB_KIND).first()


@dataclass(frozen=True)
class ProgressView:
    """A learner's progress on one lesson, as the pages show it."""

    read: bool
    lab_runs: int
    answered: frozenset[int]
    # The ids of the lesson's challenges the learner has solved.
    solved: frozenset[str] = frozenset()
    # ... and of those a live run of the solved answer confirmed (accounts only).
    confirmed: frozenset[str] = frozenset()

    def answered_of(self, total: int) -> int:
        return len({n for n in self.answered if 0 <= n < total})

    def solved_of(self, ids: Iterable[str]) -> int:
        return len(self.solved.intersection(ids))

    def confirmed_of(self, ids: Iterable[str]) -> int:
        return len(self.confirmed.intersection(ids))


NO_PROGRESS = ProgressView(read=False, lab_runs=0, answered=frozenset())


def progress_by_slug(*, user_id: int | None) -> dict[str, ProgressView]:
    """Return the learner's progress per lesson slug ({} for an anonymous visitor)."""
    if user_id is None:
        return {}
    solved = challenges_solved_by_slug(user_id=user_id)
    confirmed = challenges_confirmed_by_slug(user_id=user_id)
    views = {
        row.slug: ProgressView(
            read=row.read_at is not None,
            lab_runs=row.lab_runs,
            answered=frozenset(n for n in row.answered if isinstance(n, int)),
            solved=solved.get(row.slug, frozenset()),
            confirmed=confirmed.get(row.slug, frozenset()),
        )
        for row in LessonProgress.objects.filter(user_id=user_id)
    }
    for slug, ids in solved.items():
        kept = confirmed.get(slug, frozenset())
        views.setdefault(slug, replace(NO_PROGRESS, solved=ids, confirmed=kept))
    return views


def progress_of_session(
    entries: Mapping[str, Mapping[str, object]],
) -> dict[str, ProgressView]:
    """Return an anonymous visitor's progress per lesson, from their session."""
    views = {}
    for slug, entry in entries.items():
        read, answered, lab_runs = progress_entry(entry)
        views[slug] = ProgressView(
            read=read,
            lab_runs=lab_runs,
            answered=answered,
            solved=session_solved(entry),
        )
    return views


def progress_get(*, user_id: int | None, slug: str) -> ProgressView:
    """Return the learner's progress on one lesson."""
    if user_id is None:
        return NO_PROGRESS
    solved = challenges_solved(user_id=user_id, slug=slug)
    row = LessonProgress.objects.filter(user_id=user_id, slug=slug).first()
    if row is None:
        return replace(NO_PROGRESS, solved=solved)
    return ProgressView(
        read=row.read_at is not None,
        lab_runs=row.lab_runs,
        answered=frozenset(n for n in row.answered if isinstance(n, int)),
        solved=solved,
    )


# --- A visitor's runs ----------------------------------------------------------------

_IN_FLIGHT = (JobStatus.State.QUEUED, JobStatus.State.RUNNING)


@dataclass(frozen=True)
class RunRow:
    """One earlier run as the lesson page lists it."""

    job: JobStatus
    live: bool
    changed: tuple[tuple[str, str], ...]  # (parameter, value) that differ from defaults
    previous: uuid.UUID | None  # the visitor's run of this lab just before this one
    joined: bool = False  # it shared an identical run's result (single flight)

    @property
    def prediction(self) -> object:
        return self.job.params.get(PREDICTION_KEY) if self.job.params else None


def lab_runs_recent(*, slug: str, visitor: str, limit: int = 10) -> list[RunRow]:
    """Return the visitor's latest runs of ``slug``, newest first."""
    # This module is imported while the apps load (for its job kind), in every
    # process, and the registry imports every lab, which few processes use; so,
    # local import: the registry only when a lesson's runs are listed.
    from course.labs.registry import lab_get

    defaults = lab_get(slug).defaults()
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
            joined=run.leader_id is not None,
        )
        for i, run in enumerate(runs[:limit])
    ]


def lab_runs_of(*, visitor: str, limit: int = 12) -> list[LabRun]:
    """Return the visitor's latest runs across every lab, newest first."""
    return list(
        LabRun.objects.filter(visitor=visitor)
        .select_related("job")
        .order_by("-created_at")[:limit]
    )


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


# --- The lab service: waiting runs, turns, slots, usage ------------------------------

# Reserved keys of JobStatus.params, beside the lab's parameters (identifiers, so no
# collision): the run includes the live part; the learner's prediction.
LIVE_KEY = "_live"
PREDICTION_KEY = "_prediction"
# A lab worker whose heartbeat is older than this is gone: its slots do not count.
WORKER_SEEN_S = 30


def lab_waiting(*, live: bool) -> list[Waiting]:
    """Return the runs waiting for a slot of this kind (joined runs wait on theirs)."""
    rows = LabRun.objects.filter(
        live=live,
        leader__isnull=True,
        job__kind=LAB_JOB_KIND,
        job__state=JobStatus.State.QUEUED,
    ).values_list("job_id", "visitor", "client", "job__created_at")
    return [
        Waiting(job_id, fair_owner(visitor=visitor, client=client), created)
        for job_id, visitor, client, created in rows
    ]


def lab_waiting_total() -> int:
    """Return how many runs of either kind wait for a slot."""
    return LabRun.objects.filter(
        leader__isnull=True,
        job__kind=LAB_JOB_KIND,
        job__state=JobStatus.State.QUEUED,
    ).count()


def lab_last_served(
    owners: Iterable[str], *, now: datetime.datetime
) -> dict[str, datetime.datetime]:
    """Return when each owner's last run started (today's runs; none: never)."""
    since = now - datetime.timedelta(days=1)
    visitors = [owner for owner in owners if not owner.startswith("addr:")]
    clients = [owner[5:] for owner in owners if owner.startswith("addr:")]
    started = LabRun.objects.filter(
        created_at__gte=since, job__started_at__isnull=False
    )
    served: dict[str, datetime.datetime] = {}
    for visitor, last in (
        started.filter(visitor__in=visitors)
        .values("visitor")
        .annotate(last=Max("job__started_at"))
        .values_list("visitor", "last")
    ):
        served[visitor] = last
    for client, last in (
        started.filter(client__in=clients, visitor__startswith="anon:")
        .values("client")
        .annotate(last=Max("job__started_at"))
        .values_list("client", "last")
    ):
        served[f"addr:{client}"] = last
    return served


def lab_running(*, live: bool) -> int:
    """Return how many runs of this kind a worker is running now."""
    return LabRun.objects.filter(
        live=live,
        leader__isnull=True,
        job__kind=LAB_JOB_KIND,
        job__state=JobStatus.State.RUNNING,
    ).count()


def lab_slots(*, live: bool, now: datetime.datetime) -> int:
    """Return the slots of this kind of every lab worker seen lately (0: none runs)."""
    seen = LabWorkerState.objects.filter(
        seen_at__gte=now - datetime.timedelta(seconds=WORKER_SEEN_S)
    )
    field = "live_slots" if live else "model_slots"
    return int(seen.aggregate(total=Sum(field))["total"] or 0)


def lab_typical_run_s(*, live: bool) -> float | None:
    """Return the mean duration of the last ten finished runs of this kind."""
    recent = list(
        LabRun.objects.filter(
            live=live,
            leader__isnull=True,
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
    return sum(seconds) / len(seconds) if seconds else None


def lab_same_in_flight(*, fingerprint: str) -> JobStatus | None:
    """Return the oldest identical run waiting or running (not itself a joiner)."""
    run = (
        LabRun.objects.filter(
            fingerprint=fingerprint,
            leader__isnull=True,
            job__state__in=_IN_FLIGHT,
        )
        .select_related("job")
        .order_by("created_at")
        .first()
    )
    return run.job if run is not None else None


def lab_same_finished(
    *, fingerprint: str, since: datetime.datetime
) -> JobStatus | None:
    """Return the newest identical run that finished well since ``since``."""
    run = (
        LabRun.objects.filter(
            fingerprint=fingerprint,
            job__state=JobStatus.State.DONE,
            job__finished_at__gte=since,
        )
        .select_related("job")
        .order_by("-job__finished_at")
        .first()
    )
    return run.job if run is not None else None


def lab_usage(
    *, visitor: str, client: str, anonymous: bool, now: datetime.datetime
) -> Usage:
    """Return what a requester has in flight and has spent in the last hour.

    A learner is counted by account; an anonymous visitor by session for runs in
    flight, and by client address for the address cap and the hour's budget (a
    fresh session per request must not reset them).
    """
    mine = LabRun.objects.filter(visitor=visitor)
    address = LabRun.objects.filter(client=client, visitor__startswith="anon:")
    hour = (address if anonymous else mine).filter(
        created_at__gt=now - datetime.timedelta(hours=1)
    )
    return Usage(
        in_flight=mine.filter(job__state__in=_IN_FLIGHT).count(),
        address_in_flight=(
            address.filter(job__state__in=_IN_FLIGHT).count() if anonymous else 0
        ),
        last_hour=tuple(
            Spent(at=at, cost=cost, live=live)
            for at, cost, live in hour.values_list("created_at", "cost", "live")
        ),
    )


def lab_allowance(*, user_id: int | None) -> LabAllowance | None:
    """Return what an operator set for this learner, if anything."""
    if user_id is None:
        return None
    return LabAllowance.objects.filter(user_id=user_id).first()


def lab_leader_of(*, job_id: uuid.UUID) -> uuid.UUID | None:
    """Return the run whose result this run shares (single flight), if any."""
    return (
        LabRun.objects.filter(job_id=job_id).values_list("leader_id", flat=True).first()
    )
