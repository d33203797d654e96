"""Writes of the scheduler: claiming due slots, running a slot under its lease, and
the bodies of the library's periodic tasks.

The scheduler process calls ``schedule_claim`` for each task and enqueues one
``jobs.tasks.scheduled_run`` job per slot to run; the rq worker that takes the job
calls ``scheduled_run``, which first acquires the task's lease in Redis. Whoever
cannot get the lease skips the run: that is expected (another run is still going,
or a second scheduler enqueued the same slot) and counted, not raised.

A paused task (``ScheduledTaskState.paused_at``) runs nothing: the scheduler moves
its next slot on past each due slot and counts them in ``paused_total``, and a run
that was already queued when the pause came is dropped when a worker takes it.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

import django_rq
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.module_loading import import_string
from redis import Redis

from jobs.locks import LeaseLock, lease, lease_holder
from jobs.models import ScheduledTaskState
from jobs.schedule import (
    TASKS_BY_NAME,
    CatchUp,
    PeriodicTask,
    RunPlan,
    next_run,
    plan_runs,
)
from library.models import Branch, Loan, Notification
from library.subscribers import refresh_branch_stock
from messaging.models import OutboxMessage

log = logging.getLogger("jobs.scheduler")

# How long a loan may stay open before the daily run reminds its member.
LOAN_PERIOD_DAYS = 14
OVERDUE_KIND = "overdue"
_EPOCH_DAY = datetime.date(1970, 1, 1)
_ONE_DAY = datetime.timedelta(days=1)
# Source ids of scheduled notifications: negative, so they never meet the outbox's
# positive message ids in Notification's unique column; one per loan and day.
_SOURCE_DAYS = 100_000


def lease_name(task_name: str) -> str:
    """The lease of a task is named after the task, never after a process."""
    return f"scheduled:{task_name}"


def schedule_redis() -> Redis:
    connection: Redis = django_rq.get_connection("default")
    return connection


# --- the scheduler's side ------------------------------------------------------------


def schedule_claim(*, task: PeriodicTask, now: datetime.datetime) -> RunPlan | None:
    """Advance the task's next slot past ``now``; return what to run, None if lost.

    A task seen for the first time starts at its next slot after ``now``: a fresh
    install does not fire the monthly report on whatever day it is deployed. The
    advance is a compare-and-set on the stored slot, so of two schedulers running at
    once (a deploy overlapping the old one) exactly one claims each slot.
    """
    with transaction.atomic():
        state, created = ScheduledTaskState.objects.get_or_create(
            name=task.name,
            defaults={"next_run_at": next_run(task.recurrence, now)},
        )
        if created or state.next_run_at is None:
            if state.next_run_at is None:
                state.next_run_at = next_run(task.recurrence, now)
                state.save(update_fields=["next_run_at"])
            return RunPlan((), 0, state.next_run_at)
        if state.paused_at is not None:
            return _pass_paused(task, state, now)
        plan = plan_runs(
            task.recurrence,
            state.next_run_at,
            now,
            catch_up=task.catch_up,
            catch_up_limit=task.catch_up_limit,
        )
        if not plan.run_slots:
            return plan
        # Unpaused in the same compare-and-set: a pause that lands after the read
        # above makes the claim lose, and the next pass counts the slot as paused.
        claimed = ScheduledTaskState.objects.filter(
            name=task.name, next_run_at=state.next_run_at, paused_at__isnull=True
        ).update(
            next_run_at=plan.next_run_at, missed_total=F("missed_total") + plan.missed
        )
    if claimed != 1:
        return None  # another scheduler advanced it first and runs these slots
    if plan.missed:
        log.warning(
            "%s: %d missed run(s) dropped (%s), running %d",
            task.name,
            plan.missed,
            task.catch_up,
            len(plan.run_slots),
        )
    return plan


def _pass_paused(
    task: PeriodicTask, state: ScheduledTaskState, now: datetime.datetime
) -> RunPlan | None:
    """Move a paused task's next slot past ``now`` without running; count the slots.

    Call inside ``atomic()``. Every due slot counts, whatever the catch-up policy:
    the operator chose not to run them, so none is kept to be made up on resume.
    """
    assert state.next_run_at is not None
    plan = plan_runs(
        task.recurrence, state.next_run_at, now, catch_up=CatchUp.NO_CATCH_UP
    )
    if not plan.run_slots:
        return plan
    passed = len(plan.run_slots) + plan.missed
    claimed = ScheduledTaskState.objects.filter(
        name=task.name, next_run_at=state.next_run_at, paused_at=state.paused_at
    ).update(next_run_at=plan.next_run_at, paused_total=F("paused_total") + passed)
    if claimed != 1:
        return None  # another scheduler passed them, or the task was resumed
    log.info("%s: paused, %d slot(s) passed without running", task.name, passed)
    return RunPlan((), 0, plan.next_run_at)


# --- the run's side (an rq work-horse, or the scheduler for inline tasks) ------------


def _state_update(name: str, **fields: Any) -> None:
    if not ScheduledTaskState.objects.filter(name=name).update(**fields):
        # A run enqueued by hand before the scheduler ever saw the task.
        ScheduledTaskState.objects.get_or_create(name=name)
        ScheduledTaskState.objects.filter(name=name).update(**fields)


def scheduled_run(*, name: str, slot: datetime.datetime) -> str:
    """Run one slot of the task ``name`` under its lease; return what happened.

    Returns ``"ran"``, ``"skipped"`` or ``"paused"``; a failing task records its
    error and raises, so rq keeps the failure. Inline tasks take no lease: they run
    one after another in the scheduler, and the slot claim already keeps a second
    scheduler away.
    """
    task = TASKS_BY_NAME[name]
    # Read when the run starts, not when it was queued: a run waiting in the queue
    # when the operator paused the task must not go ahead.
    if ScheduledTaskState.objects.filter(name=name, paused_at__isnull=False).exists():
        log.info("%s: run for %s dropped, the task is paused", name, slot)
        _state_update(name, paused_total=F("paused_total") + 1)
        return "paused"
    if task.inline:
        return _run_and_record(task, slot, None)
    return "ran" if leased_run(task=task, slot=slot).ran else "skipped"


@dataclass(frozen=True)
class LeasedRun:
    ran: bool
    outcome: str  # as recorded in ScheduledTaskState.last_outcome


def leased_run(*, task: PeriodicTask, slot: datetime.datetime) -> LeasedRun:
    """Run one slot of ``task`` if its lease is free; count a skip if it is held.

    The one path of every leased run, the scheduler's and an operator's run-now
    alike, so the two never overlap. A failing task records its error and raises.
    """
    redis = schedule_redis()
    name = lease_name(task.name)
    with lease(redis, name, lease_ms=task.lease_seconds * 1000) as held:
        if held is None:
            holder = lease_holder(redis, name, now=timezone.now())
            by = holder.owner if holder else "a run that just finished"
            # Expected under overlap: informational, not an error.
            log.info("%s: run for %s skipped, lease held by %s", task.name, slot, by)
            outcome = f"skipped (locked by {by})"[:200]
            _state_update(
                task.name, skipped_total=F("skipped_total") + 1, last_outcome=outcome
            )
            return LeasedRun(ran=False, outcome=outcome)
        return LeasedRun(ran=True, outcome=_run_and_record(task, slot, held))


def _run_and_record(
    task: PeriodicTask, slot: datetime.datetime, held: LeaseLock | None
) -> str:
    _state_update(
        task.name,
        last_run_at=slot,
        last_started_at=timezone.now(),
        runs_total=F("runs_total") + 1,
        last_outcome="running",
    )
    kwargs = dict(task.kwargs)
    if task.pass_slot:
        kwargs["slot"] = slot
    try:
        # Imported here, not at start-up: a task's module may be deployed later.
        import_string(task.func)(**kwargs)
    except Exception as exc:
        _state_update(
            task.name,
            last_finished_at=timezone.now(),
            last_outcome=f"failed: {exc!r}"[:200],
        )
        raise
    outcome = "ran"
    if held is not None and held.lost.is_set():
        outcome = "ran (lease lost during the run)"
        log.warning("%s: lease lost while running slot %s", task.name, slot)
    _state_update(task.name, last_finished_at=timezone.now(), last_outcome=outcome)
    return outcome


# --- the periodic tasks of the library -----------------------------------------------


def overdue_source_id(loan_id: int, day: datetime.date) -> int:
    """Return the Notification.source_message_id of a loan's reminder on ``day``."""
    return -(loan_id * _SOURCE_DAYS + (day - _EPOCH_DAY).days)


def overdue_notifications_send(*, slot: datetime.datetime) -> int:
    """Remind every member of each open loan past its period; return how many new.

    Idempotent per day: the reminder's source id is derived from the loan and the
    slot's UTC day, and the column is unique, so a repeated or caught-up run of the
    same day writes nothing more.
    """
    day = slot.astimezone(datetime.UTC).date()
    overdue = (
        Loan.objects.filter(
            return_date__isnull=True,
            pickup_date__lt=day - datetime.timedelta(days=LOAN_PERIOD_DAYS),
        )
        .select_related("book")
        .order_by("id")
    )
    rows = {
        overdue_source_id(loan.pk, day): Notification(
            member_id=loan.member_id,
            loan_id=loan.pk,
            kind=OVERDUE_KIND,
            text=f"“{loan.book.title}” was due back "
            f"{loan.pickup_date + datetime.timedelta(days=LOAN_PERIOD_DAYS)}."[:300],
            source_message_id=overdue_source_id(loan.pk, day),
        )
        for loan in overdue
    }
    with transaction.atomic():
        sent = set(
            Notification.objects.filter(source_message_id__in=list(rows)).values_list(
                "source_message_id", flat=True
            )
        )
        fresh = [row for key, row in rows.items() if key not in sent]
        # ignore_conflicts: a concurrent run of the same day (lease expired under a
        # stalled holder) cannot make this one fail half-way.
        Notification.objects.bulk_create(fresh, batch_size=500, ignore_conflicts=True)
    return len(fresh)


def inventory_summary_refresh() -> int:
    """Recompute every branch's BranchStock totals; return how many branches.

    Uses the subscription's own handler, fed a message that names the branch: offset
    0 leaves the recorded last message id as it is.
    """
    branches = list(Branch.objects.order_by("id").values_list("id", flat=True))
    for branch_id in branches:
        with transaction.atomic():  # the handler locks the summary row
            refresh_branch_stock(OutboxMessage(id=0, body={"branch_id": branch_id}))
    return len(branches)


REPORT_START = "jobs.report.monthly_report_start"


def report_month(slot: datetime.datetime) -> str:
    """Return "YYYY-MM" of the month before the slot's UTC day: the month reported."""
    last_day = slot.astimezone(datetime.UTC).date().replace(day=1) - _ONE_DAY
    return f"{last_day.year:04d}-{last_day.month:02d}"


def monthly_loan_report_start(*, slot: datetime.datetime) -> str:
    """Start the report of the month before ``slot``; return its JobStatus id.

    The month comes from the slot, not from today, so a caught-up run reports the
    month it was due for. The report module is imported by dotted path when the run
    starts (it is maintained apart from the scheduler); it records the report's
    JobStatus and enqueues the long job, which guards itself with its own lease.
    """
    start = import_string(REPORT_START)
    job = start(month=report_month(slot))
    return str(job.pk)
