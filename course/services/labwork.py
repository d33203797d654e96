"""Carrying out lab runs: take the next one fairly, run it, share its result.

A lab worker (``manage.py labworker``) calls these from its slots and heartbeat:

1. ``lab_run_take`` takes the run whose turn it is (``course.policies.fair_order``)
   with a compare-and-set on its row, under a lease the worker's heartbeat renews.
2. ``lab_run_carry_out`` runs the model here and the live part in a sandbox of its
   own, writing progress as it goes. Every write is the lease holder's only: a run
   whose lease ran out and was failed is never written again by a late holder.
3. Each write to a run is copied onto the runs that joined it (single flight), in
   the same transaction, so a joined learner sees the same progress and result.
4. ``lab_runs_expire`` fails the runs whose worker stopped renewing (SIGKILL): the
   learner sees a failed run with a button to run it again, not "running" for ever.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid
from collections.abc import Callable

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from course.labs.harness.base import LabError, Progress
from course.labs.harness.live import LIVE_PREFIX
from course.labs.registry import lab_get
from course.models import LabWorkerState
from course.policies import fair_order, wait_estimate
from course.sandbox import lab_run_sandboxed
from course.selectors import (
    LAB_JOB_KIND,
    LIVE_KEY,
    PREDICTION_KEY,
    lab_job_get,
    lab_last_served,
    lab_running,
    lab_slots,
    lab_typical_run_s,
    lab_waiting,
)
from jobs.models import JobStatus
from jobs.services import (
    jobstatus_claim,
    jobstatus_complete,
    jobstatus_fail_owned,
    jobstatus_leases_expire,
    jobstatus_leases_renew,
    jobstatus_release,
    jobstatus_report,
    jobstatus_waiting_note,
)

log = logging.getLogger("course.labs")

# Progress below this share is the bookkeeping before the model starts.
_MODEL_START, _MODEL_SPAN = 5.0, 90.0
# With the live part: the model gets the first share, the live steps the rest.
_LIVE_MODEL_SPAN = 20.0
# Progress reports closer together than this are coalesced (the last one wins),
# so a model reporting every step costs a few writes a second, not hundreds.
_REPORT_EVERY_S = 0.25
EXPIRED = (
    "The lab worker running this run stopped before it finished (its lease ran "
    "out). Nothing of it was kept; run it again."
)
RESTARTED = "back in line: the lab worker that had started it was stopped"

_MIRRORED = (
    "state",
    "progress",
    "message",
    "result",
    "error",
    "started_at",
    "finished_at",
)


def _mirror(leader_id: uuid.UUID) -> int:
    """Copy the leader's standing onto the runs that joined it; return how many.

    Call inside the transaction that changed the leader, after the change.
    """
    standing = JobStatus.objects.filter(pk=leader_id).values(*_MIRRORED).first()
    if standing is None:
        return 0
    return (
        JobStatus.objects.filter(lab_run__leader_id=leader_id)
        .exclude(state__in=JobStatus.FINISHED)
        .update(version=F("version") + 1, **standing)
    )


def _shared(write: Callable[[], bool], job_id: uuid.UUID) -> bool:
    """Apply one write to the run and, if it took, to the runs that joined it."""
    with transaction.atomic():
        written = write()
        if written:
            _mirror(job_id)
    return written


# --- Taking a run ---------------------------------------------------------------------


def lab_run_take(
    *, live: bool, owner: str, lease_s: float, now: datetime.datetime | None = None
) -> JobStatus | None:
    """Take the waiting run of this kind whose turn it is; None when none waits.

    The order is recomputed from the rows each time; the claim is a compare-and-set
    on ``queued``, so two workers never take the same run: the loser tries the next.
    """
    now = now or timezone.now()
    waiting = lab_waiting(live=live)
    if not waiting:
        return None
    served = lab_last_served({run.owner for run in waiting}, now=now)
    for run in fair_order(waiting, served):
        job_id = run.job_id

        def claim(job_id: uuid.UUID = job_id) -> bool:
            return (
                jobstatus_claim(
                    job_id=job_id, owner=owner, lease_s=lease_s, message="starting"
                )
                is not None
            )

        if _shared(claim, job_id):
            return lab_job_get(job_id=job_id)
    return None


# --- Carrying it out ------------------------------------------------------------------


def lab_run_carry_out(
    *, job: JobStatus, owner: str, stopping: threading.Event | None = None
) -> str:
    """Run a taken lab run to its end; return its state ("done", "failed", "queued").

    Parameters are checked again (the row may have been written by hand). A
    ``LabError`` ends the run with its one-line message; any other error with a
    generic one (the traceback goes to the log). When ``stopping`` is set while the
    run fails, the worker is shutting down and killed the run's processes: the run
    goes back in line for another worker instead of failing.
    """
    stored = dict(job.params) if isinstance(job.params, dict) else {}
    live = stored.pop(LIVE_KEY, False) is True
    stored.pop(PREDICTION_KEY, None)
    report = _reporter(job.id, owner, live=live)
    try:
        lab = lab_get(job.name)
        params = lab.validate(stored)
        report(0.0, "starting")
        result = lab_run_sandboxed(lab, params, live=live, progress=report)
    except Exception as error:
        if stopping is not None and stopping.is_set():
            _shared(
                lambda: jobstatus_release(
                    job_id=job.id, owner=owner, message=RESTARTED
                ),
                job.id,
            )
            return "queued"
        if isinstance(error, LabError):
            message = str(error)
        else:
            log.exception("lab run %s (%s) crashed", job.id, job.name)
            message = (
                f"The lab stopped with an internal error ({type(error).__name__})."
            )
        _shared(
            lambda: jobstatus_fail_owned(job_id=job.id, owner=owner, error=message),
            job.id,
        )
        return "failed"
    _shared(
        lambda: jobstatus_complete(
            job_id=job.id, owner=owner, checkpoint=None, result=dict(result)
        ),
        job.id,
    )
    return "done"


def _reporter(job_id: uuid.UUID, owner: str, *, live: bool) -> Progress:
    """Map a lab's progress reports to the row's percent, a few writes a second.

    The model and the live part each report fractions from 0 to 1; a live run
    gives the model the first share and the live steps (labelled with the live
    prefix) the rest, so the bar never moves back.
    """
    in_live = False
    last_write = 0.0

    def report(fraction: float, label: str) -> None:
        nonlocal in_live, last_write
        share = max(0.0, min(1.0, fraction))
        in_live = in_live or label.startswith(LIVE_PREFIX)
        if label == "done":
            percent = _MODEL_START + _MODEL_SPAN
        elif not live:
            percent = _MODEL_START + _MODEL_SPAN * share
        elif in_live:
            live_span = _MODEL_SPAN - _LIVE_MODEL_SPAN
            percent = _MODEL_START + _LIVE_MODEL_SPAN + live_span * share
        else:
            percent = _MODEL_START + _LIVE_MODEL_SPAN * share
        now = time.monotonic()
        if now - last_write < _REPORT_EVERY_S and label != "done":
            return
        last_write = now
        _shared(
            lambda: jobstatus_report(
                job_id=job_id, owner=owner, progress=percent, message=label
            ),
            job_id,
        )

    return report


# --- Leases and the line -------------------------------------------------------------


def lab_leases_renew(*, owner: str, lease_s: float) -> int:
    """Extend the leases of the runs ``owner`` is running (the heartbeat)."""
    return jobstatus_leases_renew(kind=LAB_JOB_KIND, owner=owner, lease_s=lease_s)


def lab_runs_expire(now: datetime.datetime | None = None) -> int:
    """Fail the runs whose worker stopped renewing their lease; return how many."""
    expired = jobstatus_leases_expire(kind=LAB_JOB_KIND, error=EXPIRED, now=now)
    for job_id in expired:
        with transaction.atomic():
            _mirror(job_id)
    if expired:
        log.warning("%s lab run(s) failed: their worker's lease ran out", len(expired))
    return len(expired)


def lab_runs_hand_back(*, owner: str) -> int:
    """Put every run ``owner`` still holds back in line; return how many."""
    held = list(
        JobStatus.objects.filter(
            kind=LAB_JOB_KIND, state=JobStatus.State.RUNNING, lease_owner=owner
        ).values_list("pk", flat=True)
    )
    for job_id in held:

        def release(job_id: uuid.UUID = job_id) -> bool:
            return jobstatus_release(job_id=job_id, owner=owner, message=RESTARTED)

        _shared(release, job_id)
    return len(held)


def lab_worker_seen(
    *,
    name: str,
    host: str,
    pid: int,
    slots: tuple[int, int],
    busy: tuple[int, int],
    started_at: datetime.datetime,
) -> None:
    """Record a lab worker's heartbeat: its (live, model) slots and busy ones."""
    LabWorkerState.objects.update_or_create(
        name=name,
        defaults={
            "host": host[:100],
            "pid": pid,
            "live_slots": slots[0],
            "model_slots": slots[1],
            "busy_live": busy[0],
            "busy_model": busy[1],
            "started_at": started_at,
            "seen_at": timezone.now(),
        },
    )


def lab_worker_gone(*, name: str) -> None:
    """Forget a lab worker that stopped (its slots no longer count)."""
    LabWorkerState.objects.filter(name=name).delete()


def lab_queue_announce(*, live: bool, now: datetime.datetime | None = None) -> int:
    """Tell each waiting run of this kind its place in line; return how many moved.

    The message is what the lesson page shows while the run waits. Only a message
    that changed is written (its version moves, so the page hears of it).
    """
    now = now or timezone.now()
    waiting = lab_waiting(live=live)
    if not waiting:
        return 0
    order = fair_order(waiting, lab_last_served({w.owner for w in waiting}, now=now))
    slots = lab_slots(live=live, now=now)
    running = lab_running(live=live)
    typical = lab_typical_run_s(live=live)
    moved = 0
    for position, run in enumerate(order):
        text = place_text(
            ahead=position + running, slots=slots, typical_run_s=typical, live=live
        )

        def note(job_id: uuid.UUID = run.job_id, text: str = text) -> bool:
            return jobstatus_waiting_note(job_id=job_id, message=text)

        moved += _shared(note, run.job_id)
    return moved


def place_text(
    *, ahead: int, slots: int, typical_run_s: float | None, live: bool
) -> str:
    """Return the waiting message of a run with ``ahead`` runs before it."""
    kind = "live" if live else "model"
    if slots == 0:
        return (
            f"waiting: no lab worker is taking {kind} runs right now; yours starts "
            "when one does"
        )
    if ahead < slots:
        return f"waiting for a {kind} slot: yours is next"
    runs = "run" if ahead == 1 else "runs"
    seconds = wait_estimate(ahead=ahead, slots=slots, typical_run_s=typical_run_s)
    wait = f", about {seconds} s" if seconds else ""
    return (
        f"waiting for a {kind} slot: {ahead} {runs} ahead of yours "
        f"({slots} at once{wait})"
    )
