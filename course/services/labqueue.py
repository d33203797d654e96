"""Asking for a lab run: quotas, single flight, and a place in the fair queue.

A run waits in the database (its JobStatus row, queued, and its LabRun record) until
a lab worker (``manage.py labworker``, ``course.services.labwork``) takes it; the
workers take waiting runs round-robin across learners (``course.policies``). Redis
only carries a wake-up call to the workers, so a run asked for while Redis is away
waits a poll interval longer, and nothing is lost.

Before anything is written, the request is checked against the requester's quotas
(``course.policies.quota_check``), and an identical run is looked for:

- one waiting or running is **joined**: the new record shares its progress and
  result (``LabRun.leader``), and no worker runs the experiment twice;
- one that finished in the last ``LAB_REUSE_S`` seconds is **offered** for a live
  run (the learner may run their own anyway) and **reused** for a model run, whose
  result depends only on its parameters.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from course.labs.harness.base import Lab, LabError, Params
from course.models import LabFlight, LabRun
from course.policies import (
    Limits,
    Refusal,
    RefusalKind,
    quota_check,
    run_cost,
    run_fingerprint,
)
from course.selectors import (
    LAB_JOB_KIND,
    LIVE_KEY,
    PREDICTION_KEY,
    lab_allowance,
    lab_same_finished,
    lab_same_in_flight,
    lab_typical_run_s,
    lab_usage,
    lab_waiting_total,
)
from course.services.labwake import lab_workers_wake
from jobs.models import JobStatus
from jobs.services import jobstatus_create

log = logging.getLogger(__name__)

# Retry-After of a run refused because the whole queue is full.
QUEUE_FULL_RETRY_S = 10
# Until a run of a kind has finished, a run is taken to last about this long.
TYPICAL_RUN_S = {False: 2.0, True: 60.0}


class LabRefused(LabError):
    """The request may not start a run now; ``refusal`` says why and when to retry."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class Choice(StrEnum):
    """What the learner chose when an identical run finished lately."""

    AUTO = "auto"  # join or reuse what can be; offer a finished live run
    FRESH = "fresh"  # run my own anyway
    REUSE = "reuse"  # take the finished run's result as my run


@dataclass(frozen=True)
class Requester:
    """Who asks: ``visitor`` owns the run, ``client`` digests the address."""

    visitor: str
    client: str
    user: AbstractBaseUser | AnonymousUser | None = None

    @property
    def user_id(self) -> int | None:
        user = self.user
        if user is None or not user.is_authenticated or not user.is_active:
            return None
        return int(user.pk)


@dataclass(frozen=True)
class Asked:
    """The answer to a request: the learner's own run record, and how it was made.

    ``leader`` is the run it joined or reused (another learner's, or their own),
    ``reused`` says the result was copied from a finished run, and ``offer`` is a
    finished identical live run offered instead of a new one (no record made).
    """

    job: JobStatus | None
    leader: JobStatus | None = None
    reused: bool = False
    offer: JobStatus | None = None


def client_digest(address: str) -> str:
    """Return the digest kept for a client address (never the address itself)."""
    return hashlib.sha256(f"client:{address}".encode()).hexdigest()[:24]


def requester_limits(requester: Requester) -> Limits:
    """Return the site's quotas for this requester, with an operator's changes."""
    user_id = requester.user_id
    allowance = lab_allowance(user_id=user_id)

    def own(field: str, default: int) -> int:
        value = getattr(allowance, field, None) if allowance is not None else None
        return default if value is None else int(value)

    if user_id is None:
        return Limits(
            signed_in=False,
            live_allowed=False,
            in_flight=settings.LAB_RUNS_PER_VISITOR,
            address_in_flight=settings.LAB_ANON_RUNS_PER_ADDRESS,
            live_per_hour=0,
            cost_per_run=float(settings.LAB_ANON_COST_PER_RUN),
            cost_per_hour=float(settings.LAB_ANON_COST_PER_HOUR),
            anonymous_cost_per_run=float(settings.LAB_ANON_COST_PER_RUN),
        )
    return Limits(
        signed_in=True,
        live_allowed=allowance is None or allowance.live_allowed,
        in_flight=own("runs_in_flight", settings.LAB_RUNS_PER_VISITOR),
        address_in_flight=None,
        live_per_hour=own("live_runs_per_hour", settings.LAB_LIVE_RUNS_PER_HOUR),
        cost_per_run=float(own("cost_per_run", settings.LAB_COST_PER_RUN)),
        cost_per_hour=float(own("cost_per_hour", settings.LAB_COST_PER_HOUR)),
        anonymous_cost_per_run=float(settings.LAB_ANON_COST_PER_RUN),
    )


def lab_run_request(
    *,
    lab: Lab[Any],
    params: Params,
    requester: Requester,
    live: bool = False,
    prediction: float | None = None,
    choice: Choice = Choice.AUTO,
) -> Asked:
    """Check the request, then join, reuse, offer or queue a run; return the answer.

    Raises ``LabRefused`` with the reason (and when to retry) when the live part
    cannot run these values, or a quota, the requester's rights or the queue's
    capacity forbids it. Nothing is written then.
    """
    checked = lab.validate(params)
    if live and (reason := lab.live_refusal(checked)):
        # Now, not in the worker: a run that cannot finish never takes a place.
        raise LabRefused(Refusal(RefusalKind.MODEL_ONLY, reason))
    fingerprint = run_fingerprint(lab.slug, checked, live=live)
    now = timezone.now()
    with transaction.atomic():
        # Written first: an identical request waits here until this one commits,
        # then finds its run in flight and joins it (see LabFlight).
        LabFlight.objects.update_or_create(
            fingerprint=fingerprint, defaults={"touched_at": now}
        )
        leader = (
            None
            if choice is Choice.FRESH
            else lab_same_in_flight(fingerprint=fingerprint)
        )
        finished = None
        if leader is None and choice is not Choice.FRESH and settings.LAB_REUSE_S:
            since = now - datetime.timedelta(seconds=settings.LAB_REUSE_S)
            finished = lab_same_finished(fingerprint=fingerprint, since=since)
        if finished is not None and live and choice is Choice.AUTO:
            _check(requester, cost=0.0, live=live, now=now)
            return Asked(job=None, offer=finished)
        shared = leader or finished
        cost = 0.0 if shared is not None else run_cost(lab, checked)
        _check(requester, cost=cost, live=live, now=now)
        if shared is None and lab_waiting_total() >= settings.LAB_QUEUE_CAPACITY:
            raise LabRefused(
                Refusal(
                    RefusalKind.QUEUE_FULL,
                    "Every place in the lab queue is taken; try again in a few "
                    "seconds.",
                    QUEUE_FULL_RETRY_S,
                )
            )
        stored: dict[str, Any] = dict(checked)
        if live:
            stored[LIVE_KEY] = True
        if prediction is not None:
            stored[PREDICTION_KEY] = prediction
        job = _record(
            lab=lab,
            stored=stored,
            requester=requester,
            live=live,
            cost=cost,
            fingerprint=fingerprint,
            leader=shared,
        )
        return Asked(job=job, leader=shared, reused=finished is not None)


def _check(
    requester: Requester, *, cost: float, live: bool, now: datetime.datetime
) -> None:
    user_id = requester.user_id
    usage = lab_usage(
        visitor=requester.visitor,
        client=requester.client,
        anonymous=user_id is None,
        now=now,
    )
    refusal = quota_check(
        limits=requester_limits(requester),
        usage=usage,
        cost=cost,
        live=live,
        now=now,
        typical_run_s=lab_typical_run_s(live=live) or TYPICAL_RUN_S[live],
    )
    if refusal is not None:
        raise LabRefused(refusal)


def _record(
    *,
    lab: Lab[Any],
    stored: dict[str, Any],
    requester: Requester,
    live: bool,
    cost: float,
    fingerprint: str,
    leader: JobStatus | None,
) -> JobStatus:
    """Write the run's row and record; a joined run starts as its leader stands.

    The leader's row is locked while the copy is taken, so a leader finishing at
    that moment either sees this record among its joined runs or is seen finished
    here: the record never waits for a leader that has already finished.
    """
    with transaction.atomic():
        job = jobstatus_create(
            kind=LAB_JOB_KIND, name=lab.slug, params=stored, user=requester.user
        )
        if leader is not None:
            standing = JobStatus.objects.select_for_update().get(pk=leader.pk)
            JobStatus.objects.filter(pk=job.pk).update(
                state=standing.state,
                progress=standing.progress,
                message=standing.message,
                result=standing.result,
                error=standing.error,
                started_at=standing.started_at,
                finished_at=standing.finished_at,
                version=F("version") + 1,
            )
            job.refresh_from_db()
        LabRun.objects.create(
            job=job,
            slug=lab.slug,
            visitor=requester.visitor,
            live=live,
            client=requester.client,
            cost=cost,
            fingerprint=fingerprint,
            leader=leader,
        )
        if leader is None:
            transaction.on_commit(lab_workers_wake)
    return job
