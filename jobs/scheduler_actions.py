"""Operator actions on scheduled tasks: pause, resume and run now, each audited.

Every action writes one ``ScheduledTaskAction`` row (who, when, what, why) in the
transaction that makes the change, so the history can never disagree with the state.

- **Pause** stores ``paused_at``/``paused_by``/``pause_reason`` on the task's state
  row, which every scheduler and worker reads: the scheduler passes the task's slots
  without running them (counted in ``paused_total``), and a run already queued is
  dropped when a worker takes it. A run in progress finishes. A reason is required.
- **Resume** clears the pause and moves the next slot to the first one after now.
  The slots that fell in the pause are not made up, whatever the task's catch-up
  policy: catch-up repairs a scheduler outage, a pause is the operator's decision.
- **Break lease** deletes a task's lease whose holder is shown dead: a process on
  this host that no longer runs (``jobs.holders``). The lease would free itself
  when it runs out; until then every slot is skipped and run-now is refused. A
  holder that may still run (alive, or on another host) is refused: breaking its
  lease would let a second run overlap it. Audited in the admin's log of the task.
- **Run now** queues one run of the task's current slot (the newest slot at or
  before now, ``jobs.recurrence.current_slot``) on the task's rq queue. The worker
  runs it through ``leased_run``, the scheduler's own path, so it never overlaps a
  scheduled run: when the lease is held at the request it is refused with the
  holder's name, and a scheduled run that takes the lease first makes it a counted
  skip. A paused task may still be run now: the pause stops the schedule, not the
  operator. Inline tasks are refused: they run every few seconds inside the
  scheduler without a lease, so a run from a worker could overlap the scheduler's
  own and would not come any sooner.
"""

from __future__ import annotations

import datetime
import logging

import django_rq
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from redis.exceptions import RedisError

from jobs.holders import holder_state
from jobs.locks import lease_break, lease_holder
from jobs.models import ScheduledTaskAction, ScheduledTaskState
from jobs.recurrence import CatchUp, current_slot, next_run, plan_runs
from jobs.scheduler import (
    TASKS_BY_NAME,
    PeriodicTask,
    lease_name,
    leased_run,
    schedule_redis,
)

log = logging.getLogger("jobs.scheduler")

RUN_NOW_JOB = "jobs.tasks.scheduled_run_now"
REASON_MAX = 200
QUEUED = "queued"
RUNNING = "running"
# A resume loses its compare-and-set only when a scheduler advanced the same row
# between the read and the write; a few tries outlast any scheduler pass.
_RESUME_TRIES = 5

Operator = AbstractBaseUser | AnonymousUser | None


class ScheduleActionError(Exception):
    """An operator action refused; the message says why and can be shown as is."""


def _stamp(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _task(name: str) -> PeriodicTask:
    task = TASKS_BY_NAME.get(name)
    if task is None:
        raise ScheduleActionError(f"{name} is no longer defined as a periodic task.")
    return task


def _who(user: Operator) -> tuple[User | None, str]:
    if isinstance(user, User):
        return user, user.get_username()
    return None, "(unknown)"


def _reason(reason: str, *, required: bool) -> str:
    text = " ".join(reason.split())
    if required and not text:
        raise ScheduleActionError("Give a reason: it is kept in the task's history.")
    if len(text) > REASON_MAX:
        raise ScheduleActionError(
            f"Keep the reason to {REASON_MAX} characters (it has {len(text)})."
        )
    return text


def _audit(
    *,
    name: str,
    kind: ScheduledTaskAction.Kind,
    user: Operator,
    reason: str,
    outcome: str,
    at: datetime.datetime,
    slot: datetime.datetime | None = None,
    finished: bool = True,
) -> ScheduledTaskAction:
    account, username = _who(user)
    return ScheduledTaskAction.objects.create(
        task_id=name,
        kind=kind,
        at=at,
        user=account,
        username=username,
        reason=reason,
        slot=slot,
        outcome=outcome[:200],
        finished_at=at if finished else None,
    )


def _state_row(name: str) -> ScheduledTaskState:
    """Return the task's state row, created when the scheduler has not seen it yet.

    A new row has no next slot; the scheduler's first claim sets it without running.
    """
    state, _ = ScheduledTaskState.objects.get_or_create(name=name)
    return state


# --- pause and resume ----------------------------------------------------------------


def scheduled_task_pause(
    *,
    name: str,
    user: Operator,
    reason: str,
    now: datetime.datetime | None = None,
) -> ScheduledTaskAction:
    """Pause the task ``name``: no scheduler runs it until it is resumed."""
    now = now or timezone.now()
    _task(name)
    text = _reason(reason, required=True)
    account, _ = _who(user)
    with transaction.atomic():
        _state_row(name)
        # Compare-and-set: of two operators pausing at once, one pause is recorded.
        paused = ScheduledTaskState.objects.filter(
            name=name, paused_at__isnull=True
        ).update(paused_at=now, paused_by=account, pause_reason=text)
        if paused != 1:
            raise ScheduleActionError(_already_paused(name))
        action = _audit(
            name=name,
            kind=ScheduledTaskAction.Kind.PAUSE,
            user=user,
            reason=text,
            outcome="paused",
            at=now,
        )
    log.info("%s: paused by %s: %s", name, action.username, text)
    return action


def _already_paused(name: str) -> str:
    state = ScheduledTaskState.objects.select_related("paused_by").get(name=name)
    assert state.paused_at is not None
    who = state.paused_by.get_username() if state.paused_by else "someone"
    return f"{name} is already paused (by {who} since {_stamp(state.paused_at)})."


def slots_between(
    task: PeriodicTask, start: datetime.datetime, end: datetime.datetime
) -> int:
    """Return how many of the task's slots fall after ``start`` and by ``end``."""
    plan = plan_runs(
        task.recurrence,
        next_run(task.recurrence, start),
        end,
        catch_up=CatchUp.NO_CATCH_UP,
    )
    return len(plan.run_slots) + plan.missed


def scheduled_task_resume(
    *,
    name: str,
    user: Operator,
    reason: str = "",
    now: datetime.datetime | None = None,
) -> ScheduledTaskAction:
    """Resume the paused task ``name`` from its first slot after now.

    Slots the scheduler has not passed yet (it was down, or between passes) are
    passed here and counted as paused, so none of them is made up by catch-up.
    """
    now = now or timezone.now()
    task = _task(name)
    text = _reason(reason, required=False)
    for _ in range(_RESUME_TRIES):
        with transaction.atomic():
            state = ScheduledTaskState.objects.filter(name=name).first()
            if state is None or state.paused_at is None:
                raise ScheduleActionError(f"{name} is not paused.")
            passed, following = 0, next_run(task.recurrence, now)
            if state.next_run_at is not None:
                plan = plan_runs(
                    task.recurrence,
                    state.next_run_at,
                    now,
                    catch_up=CatchUp.NO_CATCH_UP,
                )
                passed = len(plan.run_slots) + plan.missed
                following = plan.next_run_at
            # Both columns compared: a scheduler pass that advanced the slot in the
            # meantime, or another resume, makes this write lose and try again.
            resumed = ScheduledTaskState.objects.filter(
                name=name, paused_at=state.paused_at, next_run_at=state.next_run_at
            ).update(
                paused_at=None,
                paused_by=None,
                pause_reason="",
                next_run_at=following,
                paused_total=F("paused_total") + passed,
            )
            if resumed != 1:
                continue
            fell = slots_between(task, state.paused_at, now)
            action = _audit(
                name=name,
                kind=ScheduledTaskAction.Kind.RESUME,
                user=user,
                reason=text,
                outcome=(
                    f"resumed: {fell} slot(s) fell in the pause, not made up; "
                    f"next run {_stamp(following)}"
                ),
                at=now,
            )
        log.info("%s: resumed by %s", name, action.username)
        return action
    raise ScheduleActionError(
        f"{name} was being changed by a scheduler at the same moment; try again."
    )


# --- break a dead holder's lease -----------------------------------------------------


def scheduled_task_lease_break(
    *,
    name: str,
    user: Operator,
    reason: str,
    now: datetime.datetime | None = None,
) -> str:
    """Delete the task's lease if its holder is shown dead; return what was done.

    Refused (``ScheduleActionError``) when the lease is free, when its holder runs
    or cannot be looked up from this host, and when the holder changed between the
    check and the delete. A reason is required; it goes into the admin's log.
    """
    now = now or timezone.now()
    _task(name)
    text = _reason(reason, required=True)
    redis = schedule_redis()
    try:
        holder = lease_holder(redis, lease_name(name), now=now)
    except RedisError as error:
        raise ScheduleActionError(
            "Redis is unreachable: the lease cannot be read, nothing was changed."
        ) from error
    if holder is None:
        raise ScheduleActionError(f"The lease of {name} is free: nothing to break.")
    state = holder_state(holder.owner)
    if not state.dead:
        raise ScheduleActionError(
            f"The lease of {name} is held by {holder.owner} until "
            f"{_stamp(holder.expires_at)}, and {state.explanation}: breaking it could "
            "let a second run overlap a live one. Wait for the lease to run out."
        )
    if not lease_break(redis, lease_name(name), owner=holder.owner):
        raise ScheduleActionError(
            f"The lease of {name} changed hands while it was checked; look again."
        )
    outcome = f"broke the lease of {holder.owner}: {state.explanation}"
    account, username = _who(user)
    if account is not None:
        LogEntry.objects.log_actions(
            account.pk, [_state_row(name)], CHANGE, f"Lease broken ({text}): {outcome}"
        )
    log.warning("%s: lease broken by %s (%s): %s", name, username, text, outcome)
    return outcome


# --- run now -------------------------------------------------------------------------


def run_now_refusal(task: PeriodicTask) -> str | None:
    """Return why the task cannot be run now from the admin, None when it can."""
    if task.inline:
        return (
            f"{task.name} runs inline in the scheduler ({task.recurrence.describe()}), "
            "without a lease: a run from a worker could overlap the scheduler's own "
            "and would come no sooner than its next slot."
        )
    return None


def scheduled_task_run_now(
    *,
    name: str,
    user: Operator,
    reason: str = "",
    now: datetime.datetime | None = None,
) -> ScheduledTaskAction:
    """Queue one run of the task's current slot, outside its schedule.

    Refused while the task's lease is held (a run is going on) and while another
    run-now of it is queued or running. The queued job is
    ``jobs.tasks.scheduled_run_now``; its outcome is written onto the returned row.
    """
    now = now or timezone.now()
    task = _task(name)
    refusal = run_now_refusal(task)
    if refusal:
        raise ScheduleActionError(refusal)
    text = _reason(reason, required=False)
    try:
        holder = lease_holder(schedule_redis(), lease_name(name), now=now)
    except RedisError as error:
        raise ScheduleActionError(
            "Redis is unreachable: the lease cannot be checked, nothing was queued."
        ) from error
    if holder is not None:
        raise ScheduleActionError(
            f"{name} is running now: its lease is held by {holder.owner} until "
            f"{_stamp(holder.expires_at)}. Nothing was queued; run it again once "
            "the lease is free."
        )
    slot = current_slot(task.recurrence, now)
    # A run-now that never reported back (its worker was killed) stops blocking
    # the next one once it could no longer be running.
    stale = now - datetime.timedelta(seconds=task.timeout_seconds + task.lease_seconds)
    with transaction.atomic():
        _state_row(name)
        claimed = (
            ScheduledTaskState.objects.filter(name=name)
            .filter(Q(run_now_queued_at__isnull=True) | Q(run_now_queued_at__lt=stale))
            .update(run_now_queued_at=now)
        )
        if claimed != 1:
            raise ScheduleActionError(
                f"A run-now of {name} is already queued or running; its outcome "
                "will show in the history."
            )
        action = _audit(
            name=name,
            kind=ScheduledTaskAction.Kind.RUN_NOW,
            user=user,
            reason=text,
            outcome=QUEUED,
            at=now,
            slot=slot,
            finished=False,
        )
    try:
        # After the commit above (django-rq's on_db_commit defers it further when a
        # caller's transaction is still open): the worker always finds the row.
        django_rq.get_queue(task.queue).enqueue(
            RUN_NOW_JOB, action_id=action.pk, job_timeout=task.timeout_seconds
        )
    except RedisError as error:
        _action_finish(action, "not queued: Redis unreachable")
        raise ScheduleActionError(
            "Redis is unreachable: the run was not queued."
        ) from error
    log.info("%s: run now for %s queued by %s", name, slot, action.username)
    return action


def _action_finish(action: ScheduledTaskAction, outcome: str) -> None:
    with transaction.atomic():
        ScheduledTaskAction.objects.filter(pk=action.pk).update(
            outcome=outcome[:200], finished_at=timezone.now()
        )
        # Only this run-now's mark: a newer one (after a stale mark) keeps its own.
        ScheduledTaskState.objects.filter(
            name=action.task_id, run_now_queued_at=action.at
        ).update(run_now_queued_at=None)


def scheduled_task_action_run(*, action_id: int) -> str:
    """Run a queued run-now under the task's lease; record and return its outcome.

    The row is claimed with a compare-and-set from "queued", so a job that rq runs
    a second time (requeued after a lost worker) does not run the task again.
    """
    claimed = ScheduledTaskAction.objects.filter(
        pk=action_id, kind=ScheduledTaskAction.Kind.RUN_NOW, outcome=QUEUED
    ).update(outcome=RUNNING)
    if claimed != 1:
        log.info("run-now %s: already taken or not a run-now, left alone", action_id)
        return "already taken"
    action = ScheduledTaskAction.objects.get(pk=action_id)
    task = TASKS_BY_NAME.get(action.task_id)
    if task is None or action.slot is None:
        _action_finish(action, "failed: the task is no longer defined")
        return "failed"
    try:
        run = leased_run(task=task, slot=action.slot)
    except Exception as exc:
        _action_finish(action, f"failed: {exc!r}")
        raise
    _action_finish(action, run.outcome)
    return run.outcome
