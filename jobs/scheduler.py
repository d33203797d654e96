"""The scheduler: the registry of periodic tasks, claiming due slots, and running a
slot under its lease.

Each app declares its own periodic tasks (``<app>/periodic.py``) and registers them
with ``periodic_tasks_register`` from its ``AppConfig.ready()``, so every process
(web, worker, the scheduler command) sees the same list and this module imports
none of the code it runs: a task names its body by dotted path.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import django_rq
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.module_loading import import_string
from redis import Redis

from jobs.locks import LeaseLock, lease, lease_holder
from jobs.models import ScheduledTaskState
from jobs.recurrence import CatchUp, Recurrence, RunPlan, next_run, plan_runs

log = logging.getLogger("jobs.scheduler")


@dataclass(frozen=True)
class PeriodicTask:
    name: str
    func: str  # dotted path, imported when a run starts
    recurrence: Recurrence
    queue: str = "default"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    # Inline tasks run in the scheduler process itself: the messaging sweep must work
    # when Redis lost its queues, so it cannot wait in one.
    inline: bool = False
    catch_up: CatchUp = CatchUp.NO_CATCH_UP
    catch_up_limit: int = 1
    # Passed as ``slot=`` (aware UTC datetime): tasks whose effect belongs to a slot
    # (one notification per loan per day, one report per month).
    pass_slot: bool = False
    # The lease outlives a stalled holder by at most this long; a running holder
    # renews it every third of it, so a long run keeps it.
    lease_seconds: int = 60
    timeout_seconds: int = 300  # rq's job timeout


# Every process's periodic tasks by name, in registration order: filled by each
# owner's AppConfig.ready() (INSTALLED_APPS order), read by the scheduler, the
# workers and the admin.
TASKS_BY_NAME: dict[str, PeriodicTask] = {}


def periodic_tasks_register(*tasks: PeriodicTask) -> None:
    """Add ``tasks`` to the registry; a name is the task's identity in the database.

    Registering the same task again is harmless (a second ``django.setup()``); two
    different tasks under one name would share their stored state, so that raises.
    """
    for task in tasks:
        known = TASKS_BY_NAME.get(task.name)
        if known is not None and known != task:
            raise RuntimeError(f"two periodic tasks share the name {task.name!r}")
        TASKS_BY_NAME[task.name] = task


def periodic_tasks() -> tuple[PeriodicTask, ...]:
    """Return every registered periodic task, in registration order."""
    return tuple(TASKS_BY_NAME.values())


def lease_name(task_name: str) -> str:
    """The lease of a task is named after the task, never after a process."""
    return f"scheduled:{task_name}"


def schedule_redis() -> Redis:
    connection: Redis = django_rq.get_connection("default")
    return connection


# --- the scheduler's side ------------------------------------------------------------


def tasks_due(
    tasks: tuple[PeriodicTask, ...], now: datetime.datetime
) -> list[PeriodicTask]:
    """Return the tasks a pass at ``now`` must claim, in one read of every slot.

    Due: a slot at or before ``now`` (paused or not: a paused task's slots are
    passed by the claim), or no slot yet. The read only picks whom to claim; the
    claim itself compares and sets, so a slot another scheduler moved meanwhile
    is lost there, never run twice.
    """
    slots = dict(
        ScheduledTaskState.objects.filter(
            name__in=[task.name for task in tasks]
        ).values_list("name", "next_run_at")
    )
    due = []
    for task in tasks:
        slot = slots.get(task.name)
        if slot is None or slot <= now:
            due.append(task)
    return due


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
