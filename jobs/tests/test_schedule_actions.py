"""Operator actions on scheduled tasks: pause, resume and run now, with their audit.

Real Redis and the real lease throughout; the scheduler's pass is driven with an
injected clock (``Command().step(now=…)``); runs go through rq workers (in-process
burst workers here, a real ``manage.py rqworker`` process at the end).
"""

import datetime

import django_rq
import pytest
from django.contrib.auth.models import User

from config.processes import kill, start_manage
from jobs.locks import LeaseLock
from jobs.management.commands.scheduler import Command
from jobs.models import ScheduledTaskAction, ScheduledTaskState
from jobs.recurrence import (
    Daily,
    Every,
    MonthEnd,
    Monthly,
    current_slot,
    next_run,
)
from jobs.scheduler import TASKS_BY_NAME, lease_name, scheduled_run
from jobs.scheduler_actions import (
    ScheduleActionError,
    scheduled_task_action_run,
    scheduled_task_pause,
    scheduled_task_resume,
    scheduled_task_run_now,
)
from library.models import Book, Branch, Loan, Member, Notification

UTC = datetime.UTC
MINUTE = datetime.timedelta(minutes=1)
DAY = datetime.timedelta(days=1)


def at(year, month, day, hour=0, minute=0, second=0) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def queued(name: str | None = None) -> list[dict[str, object]]:
    """The kwargs of every scheduled or run-now job waiting in any queue."""
    return [
        job.kwargs
        for queue in ("default", "messaging")
        for job in django_rq.get_queue(queue).jobs
        if name is None or job.kwargs.get("name") == name
    ]


def burst() -> None:
    # In-process: a forked work-horse would not see the test's transaction.
    django_rq.get_worker("default", worker_class="rq.SimpleWorker").work(burst=True)


def state(name: str) -> ScheduledTaskState:
    return ScheduledTaskState.objects.get(name=name)


@pytest.fixture
def operator():
    return User.objects.create_user("ops", password="pw", is_staff=True)


# --- current_slot: the slot a run-now belongs to (pure) ------------------------------


@pytest.mark.parametrize(
    ("recurrence", "now", "slot"),
    [
        (Daily(6), at(2026, 2, 1, 9), at(2026, 2, 1, 6)),
        (Daily(6), at(2026, 2, 1, 5, 59), at(2026, 1, 31, 6)),
        (Daily(6), at(2026, 2, 1, 6), at(2026, 2, 1, 6)),  # on the slot: that slot
        (Every.minutes(15), at(2026, 2, 1, 10, 44, 59), at(2026, 2, 1, 10, 30)),
        (Every.minutes(15), at(2026, 2, 1, 10, 45), at(2026, 2, 1, 10, 45)),
        (Monthly(1, 2), at(2026, 2, 17), at(2026, 2, 1, 2)),
        (Monthly(1, 2), at(2026, 2, 1, 1), at(2026, 1, 1, 2)),
        (Monthly(31, 2, month_end=MonthEnd.SKIP), at(2026, 3, 30), at(2026, 1, 31, 2)),
        (Monthly(31, 2, month_end=MonthEnd.CLAMP), at(2026, 3, 1), at(2026, 2, 28, 2)),
        (
            Monthly(31, 2, month_end=MonthEnd.OVERFLOW),
            at(2026, 3, 10),
            at(2026, 3, 3, 2),
        ),
    ],
)
def test_current_slot_is_the_newest_slot_at_or_before_now(recurrence, now, slot):
    assert current_slot(recurrence, now) == slot
    assert next_run(recurrence, slot) > now  # nothing newer lies in between


# --- pause and the scheduler's pass --------------------------------------------------


@pytest.mark.django_db
def test_pause_records_who_why_and_an_audit_row(operator):
    now = at(2026, 2, 1, 9)
    action = scheduled_task_pause(
        name="inventory_summary",
        user=operator,
        reason="  branch audit \n today ",
        now=now,
    )
    paused = state("inventory_summary")
    assert (paused.paused_at, paused.paused_by, paused.pause_reason) == (
        now,
        operator,
        "branch audit today",
    )
    row = ScheduledTaskAction.objects.get()
    assert row == action
    assert (row.task_id, row.kind, row.username, row.reason, row.outcome, row.at) == (
        "inventory_summary",
        "pause",
        "ops",
        "branch audit today",
        "paused",
        now,
    )


@pytest.mark.django_db
def test_pause_needs_a_reason_and_happens_once(operator):
    with pytest.raises(ScheduleActionError, match="reason"):
        scheduled_task_pause(name="inventory_summary", user=operator, reason="   ")
    with pytest.raises(ScheduleActionError, match="200 characters"):
        scheduled_task_pause(name="inventory_summary", user=operator, reason="x" * 201)
    assert not ScheduledTaskState.objects.filter(paused_at__isnull=False).exists()
    scheduled_task_pause(name="inventory_summary", user=operator, reason="audit")
    with pytest.raises(ScheduleActionError, match="already paused \\(by ops since"):
        scheduled_task_pause(name="inventory_summary", user=operator, reason="again")
    with pytest.raises(ScheduleActionError, match="no longer defined"):
        scheduled_task_pause(name="gone", user=operator, reason="x")
    assert ScheduledTaskAction.objects.count() == 1


@pytest.mark.django_db
def test_the_scheduler_passes_a_paused_tasks_slots_and_counts_them(
    redis_client, operator, django_capture_on_commit_callbacks
):
    start = at(2026, 2, 1, 10, 0, 30)
    scheduler = Command()
    with django_capture_on_commit_callbacks(execute=True):
        scheduler.step(now=start)  # first sight: every task gets its next slot
    assert state("inventory_summary").next_run_at == at(2026, 2, 1, 10, 15)
    scheduled_task_pause(
        name="inventory_summary", user=operator, reason="audit", now=start
    )
    # An hour of passes a minute apart: four quarter-hour slots fall due.
    for minute in range(1, 61):
        with django_capture_on_commit_callbacks(execute=True):
            started = scheduler.step(now=start + minute * MINUTE)
        assert "inventory_summary" not in started
    summary = state("inventory_summary")
    assert (summary.paused_total, summary.runs_total, summary.missed_total) == (4, 0, 0)
    assert summary.next_run_at == at(2026, 2, 1, 11, 15)
    assert queued("inventory_summary") == []
    # The other tasks were not held up by the pause.
    assert state("rq_maintenance").next_run_at == at(2026, 2, 1, 11, 1)
    assert any(job["name"] == "rq_maintenance" for job in queued())


@pytest.mark.django_db
def test_a_run_queued_before_the_pause_is_dropped_when_it_starts(
    redis_client, operator, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        django_rq.get_queue("default").enqueue(
            "jobs.tasks.scheduled_run",
            name="inventory_summary",
            slot=at(2026, 2, 1, 10, 15).isoformat(),
        )
    scheduled_task_pause(name="inventory_summary", user=operator, reason="audit")
    burst()
    summary = state("inventory_summary")
    assert (summary.runs_total, summary.paused_total, summary.last_run_at) == (
        0,
        1,
        None,
    )


@pytest.mark.django_db
def test_resume_starts_at_the_next_slot_and_makes_nothing_up(
    redis_client, operator, django_capture_on_commit_callbacks
):
    # The monthly report catches up to three missed months after an outage; a
    # pause is not an outage, so none of its months is made up.
    task = TASKS_BY_NAME["monthly_loan_report"]
    assert task.catch_up == "catch_up"
    scheduler = Command()
    start = at(2026, 1, 15)
    with django_capture_on_commit_callbacks(execute=True):
        scheduler.step(now=start)
    scheduled_task_pause(
        name=task.name, user=operator, reason="new report format", now=start
    )
    # The scheduler was down for the whole pause: Feb 1, Mar 1, Apr 1 fell due and
    # no pass saw them. Resume passes them itself.
    resumed_at = at(2026, 4, 20)
    action = scheduled_task_resume(
        name=task.name, user=operator, reason="format shipped", now=resumed_at
    )
    report = state(task.name)
    assert report.paused_at is None
    assert (report.paused_by, report.pause_reason) == (None, "")
    assert report.next_run_at == at(2026, 5, 1, 2)
    assert report.paused_total == 3
    assert action.outcome == (
        "resumed: 3 slot(s) fell in the pause, not made up; "
        "next run 2026-05-01 02:00:00 UTC"
    )
    assert (action.kind, action.reason, action.username) == (
        "resume",
        "format shipped",
        "ops",
    )
    with django_capture_on_commit_callbacks(execute=True):
        scheduler.step(now=resumed_at + MINUTE)
        assert scheduler.step(now=at(2026, 5, 1, 2, 0, 1)).count(task.name) == 1
    runs = [job["slot"] for job in queued(task.name)]
    assert runs == [at(2026, 5, 1, 2).isoformat()]  # May only, no Feb/Mar/Apr
    with pytest.raises(ScheduleActionError, match="not paused"):
        scheduled_task_resume(name=task.name, user=operator)
    assert list(ScheduledTaskAction.objects.values_list("kind", flat=True)) == [
        "resume",
        "pause",
    ]


@pytest.mark.django_db
def test_resume_after_passes_keeps_the_slot_the_scheduler_set(
    redis_client, operator, django_capture_on_commit_callbacks
):
    start = at(2026, 2, 1, 10, 0, 30)
    scheduler = Command()
    with django_capture_on_commit_callbacks(execute=True):
        scheduler.step(now=start)
    scheduled_task_pause(name="inventory_summary", user=operator, reason="x", now=start)
    with django_capture_on_commit_callbacks(execute=True):
        scheduler.step(now=at(2026, 2, 1, 10, 31))
    assert state("inventory_summary").paused_total == 2
    action = scheduled_task_resume(
        name="inventory_summary", user=operator, now=at(2026, 2, 1, 10, 40)
    )
    summary = state("inventory_summary")
    assert (summary.next_run_at, summary.paused_total) == (at(2026, 2, 1, 10, 45), 2)
    assert action.outcome.startswith("resumed: 2 slot(s) fell in the pause")


# --- run now -------------------------------------------------------------------------


@pytest.mark.django_db
def test_run_now_queues_the_current_slot_and_the_worker_records_the_outcome(
    redis_client, operator, django_capture_on_commit_callbacks
):
    Branch.objects.create(name="Main", city="Izmir")
    now = at(2026, 2, 1, 10, 7)
    with django_capture_on_commit_callbacks(execute=True):
        action = scheduled_task_run_now(
            name="inventory_summary", user=operator, reason="stock looked off", now=now
        )
    assert (action.kind, action.outcome, action.slot) == (
        "run_now",
        "queued",
        at(2026, 2, 1, 10),
    )
    assert queued() == [{"action_id": action.pk}]
    assert state("inventory_summary").run_now_queued_at == now
    burst()
    action.refresh_from_db()
    assert action.outcome == "ran"
    assert action.finished_at is not None
    summary = state("inventory_summary")
    assert (summary.runs_total, summary.last_run_at, summary.last_outcome) == (
        1,
        at(2026, 2, 1, 10),
        "ran",
    )
    assert summary.run_now_queued_at is None  # the next run-now may be asked for
    assert redis_client.get(f"lease:{lease_name('inventory_summary')}") is None


@pytest.mark.django_db
def test_run_now_is_refused_while_the_lease_is_held(redis_client, operator):
    holder = LeaseLock(redis_client, lease_name("inventory_summary"), lease_ms=60_000)
    assert holder.acquire()
    with pytest.raises(ScheduleActionError) as refused:
        scheduled_task_run_now(name="inventory_summary", user=operator)
    assert f"lease is held by {holder.owner} until" in str(refused.value)
    assert queued() == []
    assert not ScheduledTaskAction.objects.exists()
    assert holder.release_if_owned()
    scheduled_task_run_now(name="inventory_summary", user=operator)
    assert ScheduledTaskAction.objects.count() == 1


@pytest.mark.django_db
def test_a_lease_taken_after_the_request_makes_the_run_now_a_counted_skip(
    redis_client, operator, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        action = scheduled_task_run_now(name="inventory_summary", user=operator)
    # A scheduled run takes the lease between the request and the worker.
    holder = LeaseLock(redis_client, lease_name("inventory_summary"), lease_ms=60_000)
    assert holder.acquire()
    burst()
    action.refresh_from_db()
    assert action.outcome == f"skipped (locked by {holder.owner})"
    summary = state("inventory_summary")
    assert (summary.runs_total, summary.skipped_total) == (0, 1)
    assert summary.run_now_queued_at is None
    assert redis_client.get(f"lease:{lease_name('inventory_summary')}").decode() == (
        holder.owner  # the skipped run left the holder's lease alone
    )


@pytest.mark.django_db
def test_a_second_run_now_waits_for_the_first_and_a_stale_one_stops_blocking(
    redis_client, operator
):
    task = TASKS_BY_NAME["inventory_summary"]
    now = at(2026, 2, 1, 10, 7)
    first = scheduled_task_run_now(name=task.name, user=operator, now=now)
    with pytest.raises(ScheduleActionError, match="already queued or running"):
        scheduled_task_run_now(name=task.name, user=operator, now=now + MINUTE)
    # Its worker died without a word: once it could no longer be running, it no
    # longer blocks.
    later = now + datetime.timedelta(
        seconds=task.timeout_seconds + task.lease_seconds + 1
    )
    second = scheduled_task_run_now(name=task.name, user=operator, now=later)
    assert state(task.name).run_now_queued_at == later
    # The first job, run at last, clears nothing of the second's mark.
    scheduled_task_action_run(action_id=first.pk)
    assert state(task.name).run_now_queued_at == later
    assert scheduled_task_action_run(action_id=second.pk) == "ran"
    assert scheduled_task_action_run(action_id=second.pk) == "already taken"
    assert state(task.name).runs_total == 2


@pytest.mark.django_db
def test_run_now_refuses_inline_and_undefined_tasks(redis_client, operator):
    with pytest.raises(ScheduleActionError, match="runs inline in the scheduler"):
        scheduled_task_run_now(name="messaging_sweep", user=operator)
    with pytest.raises(ScheduleActionError, match="no longer defined"):
        scheduled_task_run_now(name="gone", user=operator)
    assert queued() == []
    assert not ScheduledTaskAction.objects.exists()


@pytest.mark.django_db
def test_run_now_works_on_a_paused_task_which_stays_paused(
    redis_client, operator, django_capture_on_commit_callbacks
):
    scheduled_task_pause(name="inventory_summary", user=operator, reason="audit")
    with django_capture_on_commit_callbacks(execute=True):
        action = scheduled_task_run_now(name="inventory_summary", user=operator)
    burst()
    action.refresh_from_db()
    assert action.outcome == "ran"
    summary = state("inventory_summary")
    assert (summary.runs_total, summary.paused_total) == (1, 0)
    assert summary.is_paused


@pytest.mark.django_db
def test_a_failing_run_now_records_the_error(
    redis_client, operator, monkeypatch, django_capture_on_commit_callbacks
):
    def broken(message: object) -> None:
        raise RuntimeError("shelf database gone")

    monkeypatch.setattr("library.services.inventory.refresh_branch_stock", broken)
    Branch.objects.create(name="Main", city="Izmir")
    with django_capture_on_commit_callbacks(execute=True):
        action = scheduled_task_run_now(name="inventory_summary", user=operator)
    burst()
    action.refresh_from_db()
    assert action.outcome == "failed: RuntimeError('shelf database gone')"
    assert state("inventory_summary").run_now_queued_at is None
    (failed,) = django_rq.get_queue("default").failed_job_registry.get_job_ids()
    assert failed  # rq keeps the failure too


@pytest.mark.django_db
def test_run_now_of_todays_overdue_slot_sends_no_duplicates(
    redis_client, operator, django_capture_on_commit_callbacks
):
    branch = Branch.objects.create(name="Main", city="Izmir")
    book = Book.objects.create(title="Sand", author="B", branch=branch, on_shelf=3)
    member = Member.objects.create(
        first_name="Ada", last_name="L", registered_at=datetime.date(2025, 1, 1)
    )
    Loan.objects.create(book=book, member=member, pickup_date=datetime.date(2026, 1, 2))
    today = at(2026, 2, 1, 6)
    assert scheduled_run(name="overdue_notifications", slot=today) == "ran"
    assert Notification.objects.filter(kind="overdue").count() == 1
    # Three hours later an operator runs it again: the same day's slot.
    with django_capture_on_commit_callbacks(execute=True):
        action = scheduled_task_run_now(
            name="overdue_notifications",
            user=operator,
            reason="did the reminders go out?",
            now=today + datetime.timedelta(hours=3),
        )
    assert action.slot == today
    burst()
    action.refresh_from_db()
    assert action.outcome == "ran"
    assert Notification.objects.filter(kind="overdue").count() == 1  # guard held
    assert state("overdue_notifications").runs_total == 2


# --- a real worker process -----------------------------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_run_now_runs_in_a_real_rqworker_process(redis_client):
    operator = User.objects.create_user("ops", password="pw", is_staff=True)
    Branch.objects.create(name="Main", city="Izmir")
    action = scheduled_task_run_now(name="inventory_summary", user=operator)
    worker = start_manage("rqworker", "default", "--burst")
    try:
        assert worker.wait(timeout=120) == 0
    finally:
        kill(worker)
    action.refresh_from_db()
    assert action.outcome == "ran"
    assert action.finished_at is not None
    summary = state("inventory_summary")
    assert (summary.runs_total, summary.last_outcome) == (1, "ran")
    assert summary.last_run_at == action.slot
