"""The scheduler process's pass, runs under the lease, and the library's tasks."""

import datetime
import logging

import django_rq
import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.locks import LeaseLock
from jobs.management.commands.scheduler import Command
from jobs.models import JobStatus, ScheduledTaskState
from jobs.scheduler import (
    TASKS_BY_NAME,
    lease_name,
    periodic_tasks,
    schedule_claim,
    scheduled_run,
)
from library.models import Book, Branch, BranchStock, Loan, Member, Notification
from library.services.inventory import inventory_summary_refresh
from library.services.notices import overdue_notifications_send

pytestmark = pytest.mark.django_db
UTC = datetime.UTC
SLOT = datetime.datetime(2026, 2, 1, 6, tzinfo=UTC)


def queued_runs() -> list[tuple[str, str]]:
    """(task name, slot) of every scheduled run waiting in any queue."""
    return sorted(
        (job.kwargs["name"], job.kwargs["slot"])
        for name in {task.queue for task in periodic_tasks()}
        for job in django_rq.get_queue(name).jobs
        if job.func_name == "jobs.tasks.scheduled_run"
    )


# The passes' clock, so no slot falls due between two passes of a test (the real
# clock crossed a 5-minute boundary once: the sandbox sweep came due in between).
PASS_AT = datetime.datetime(2026, 2, 1, 5, 50, 30, tzinfo=UTC)


def pass_once(capture, now: datetime.datetime = PASS_AT) -> None:
    """One pass of the scheduler process at ``now``."""
    # COMMIT_MODE=on_db_commit: the enqueue waits for the test transaction's "commit".
    with capture(execute=True):
        Command().step(now=now)


# --- the scheduler's pass ------------------------------------------------------------


def test_first_pass_schedules_every_task_without_running_any(
    redis_client, django_capture_on_commit_callbacks
):
    before = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("scheduler", "--once")  # the command itself, on the real clock
    assert queued_runs() == []
    states = {s.name: s for s in ScheduledTaskState.objects.all()}
    assert set(states) == {task.name for task in periodic_tasks()}
    for name, state in states.items():
        assert state.next_run_at is not None
        assert state.next_run_at > before, name
        assert (state.runs_total, state.skipped_total, state.missed_total) == (0, 0, 0)


def test_a_pass_with_nothing_due_reads_the_slots_once(
    redis_client, django_capture_on_commit_callbacks, django_assert_num_queries
):
    pass_once(django_capture_on_commit_callbacks)  # every task gets its first slot
    with django_assert_num_queries(1):  # one read of every slot, no claim
        assert Command().step(now=PASS_AT) == []
    # One slot moved into the past: that task alone is claimed.
    summary = ScheduledTaskState.objects.get(name="inventory_summary")
    assert summary.next_run_at is not None
    due = summary.next_run_at - datetime.timedelta(minutes=15)
    ScheduledTaskState.objects.filter(name="inventory_summary").update(next_run_at=due)
    with django_capture_on_commit_callbacks(execute=True):
        assert Command().step(now=PASS_AT) == ["inventory_summary"]
    assert [name for name, _ in queued_runs()] == ["inventory_summary"]


def months_before(instant: datetime.datetime, months: int) -> datetime.datetime:
    index = instant.year * 12 + instant.month - 1 - months
    return instant.replace(year=index // 12, month=index % 12 + 1)


def test_due_slots_are_enqueued_once_and_the_missed_counted(
    redis_client, django_capture_on_commit_callbacks
):
    pass_once(django_capture_on_commit_callbacks)
    report = ScheduledTaskState.objects.get(name="monthly_loan_report")
    summary = ScheduledTaskState.objects.get(name="inventory_summary")
    # As if the scheduler had been down: five monthly slots of the report are due
    # (catch up, the newest 3 run) and four quarter hours of the summary (no
    # catch-up: the newest runs).
    assert report.next_run_at is not None
    assert summary.next_run_at is not None
    report_first = months_before(report.next_run_at, 5)
    summary_first = summary.next_run_at - datetime.timedelta(minutes=60)
    report.next_run_at, summary.next_run_at = report_first, summary_first
    report.save()
    summary.save()

    pass_once(django_capture_on_commit_callbacks)
    runs = queued_runs()
    assert [slot for name, slot in runs if name == "monthly_loan_report"] == [
        months_before(report_first, -k).isoformat() for k in (2, 3, 4)
    ]
    assert [slot for name, slot in runs if name == "inventory_summary"] == [
        (summary_first + datetime.timedelta(minutes=45)).isoformat()
    ]
    report.refresh_from_db()
    summary.refresh_from_db()
    assert (report.missed_total, summary.missed_total) == (2, 3)
    assert report.next_run_at == months_before(report_first, -5)
    assert summary.next_run_at == summary_first + datetime.timedelta(minutes=60)
    (report_job,) = [
        job
        for job in django_rq.get_queue("default").jobs
        if job.kwargs.get("name") == "monthly_loan_report"
    ][:1]
    assert report_job.timeout == 3600

    pass_once(django_capture_on_commit_callbacks)  # nothing is due twice
    assert queued_runs() == runs


def test_a_claimed_slot_is_not_claimed_again(redis_client):
    task = TASKS_BY_NAME["inventory_summary"]
    slot = datetime.datetime(2026, 2, 1, 0, 0, tzinfo=UTC)
    ScheduledTaskState.objects.create(name=task.name, next_run_at=slot)
    now = slot + datetime.timedelta(minutes=1)
    first = schedule_claim(task=task, now=now)
    assert first is not None
    assert first.run_slots == (slot,)
    again = schedule_claim(task=task, now=now)  # a second scheduler, same instant
    assert again is not None
    assert again.run_slots == ()
    assert ScheduledTaskState.objects.get(name=task.name).next_run_at == (
        slot + datetime.timedelta(minutes=15)
    )


def test_inline_task_runs_in_the_scheduler_itself(
    redis_client, django_capture_on_commit_callbacks
):
    pass_once(django_capture_on_commit_callbacks)
    ScheduledTaskState.objects.filter(name="messaging_sweep").update(
        next_run_at=PASS_AT - datetime.timedelta(seconds=1)
    )
    pass_once(django_capture_on_commit_callbacks)
    sweep = ScheduledTaskState.objects.get(name="messaging_sweep")
    assert sweep.runs_total == 1
    assert sweep.last_outcome == "ran"
    assert all(name != "messaging_sweep" for name, _ in queued_runs())


# --- a run under the lease -----------------------------------------------------------


def test_a_run_holding_the_lease_runs_and_is_counted(redis_client):
    assert scheduled_run(name="inventory_summary", slot=SLOT) == "ran"
    state = ScheduledTaskState.objects.get(name="inventory_summary")
    assert (state.runs_total, state.skipped_total) == (1, 0)
    assert state.last_run_at == SLOT
    assert state.last_outcome == "ran"
    assert state.last_started_at is not None
    assert state.last_finished_at is not None
    assert state.last_finished_at >= state.last_started_at
    assert redis_client.get("lease:scheduled:inventory_summary") is None  # released


def test_a_run_that_cannot_get_the_lease_is_skipped_and_counted(redis_client, caplog):
    holder = LeaseLock(redis_client, lease_name("inventory_summary"), lease_ms=30_000)
    assert holder.acquire()
    with caplog.at_level(logging.INFO, logger="jobs.scheduler"):
        assert scheduled_run(name="inventory_summary", slot=SLOT) == "skipped"
        assert scheduled_run(name="inventory_summary", slot=SLOT) == "skipped"
    state = ScheduledTaskState.objects.get(name="inventory_summary")
    assert (state.runs_total, state.skipped_total) == (0, 2)
    assert state.last_outcome == f"skipped (locked by {holder.owner})"
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 2
    assert {r.levelno for r in skipped} == {logging.INFO}  # expected, not an error
    assert holder.release_if_owned()  # the skipped runs left the holder's lease alone
    assert scheduled_run(name="inventory_summary", slot=SLOT) == "ran"


def test_a_failing_run_records_its_error_and_gives_the_lease_back(
    redis_client, monkeypatch
):
    def broken(message: object) -> None:
        raise RuntimeError("the shelf database is gone")

    monkeypatch.setattr("library.services.inventory.refresh_branch_stock", broken)
    Branch.objects.create(name="Main", city="Izmir")
    with pytest.raises(RuntimeError):
        scheduled_run(name="inventory_summary", slot=SLOT)
    state = ScheduledTaskState.objects.get(name="inventory_summary")
    assert state.runs_total == 1
    assert state.last_outcome == "failed: RuntimeError('the shelf database is gone')"
    assert redis_client.get("lease:scheduled:inventory_summary") is None


def test_the_monthly_run_starts_the_report_of_the_month_before_its_slot(
    redis_client, django_capture_on_commit_callbacks
):
    pytest.importorskip("library.report")  # built separately; present in this tree
    # A caught-up slot reports its own month, not the month before today.
    with django_capture_on_commit_callbacks(execute=False):
        assert (
            scheduled_run(
                name="monthly_loan_report",
                slot=datetime.datetime(2025, 11, 1, 2, tzinfo=UTC),
            )
            == "ran"
        )
    (report,) = JobStatus.objects.all()
    assert report.params["month"] == "2025-10"
    state = ScheduledTaskState.objects.get(name="monthly_loan_report")
    assert (state.runs_total, state.last_outcome) == (1, "ran")


def test_rq_job_runs_the_slot_in_a_worker(
    redis_client, django_capture_on_commit_callbacks
):
    queue = django_rq.get_queue("default")
    with django_capture_on_commit_callbacks(execute=True):
        queue.enqueue(
            "jobs.tasks.scheduled_run", name="inventory_summary", slot=SLOT.isoformat()
        )
    (job,) = queue.jobs
    # In-process worker: a forked work-horse would not see this test's transaction.
    django_rq.get_worker("default", worker_class="rq.SimpleWorker").work(burst=True)
    job.refresh()
    assert job.return_value() == "ran"
    assert ScheduledTaskState.objects.get(name="inventory_summary").last_run_at == SLOT


# --- the library's tasks -------------------------------------------------------------


@pytest.fixture
def library():
    branch = Branch.objects.create(name="Main", city="Izmir")
    other = Branch.objects.create(name="Port", city="Izmir")
    book = Book.objects.create(title="Sand", author="B", branch=branch, on_shelf=3)
    Book.objects.create(title="Ice", author="C", branch=branch, on_shelf=2)
    Book.objects.create(title="Salt", author="D", branch=other, on_shelf=4)
    ada = Member.objects.create(
        first_name="Ada", last_name="L", registered_at=datetime.date(2025, 1, 1)
    )
    bob = Member.objects.create(
        first_name="Bob", last_name="K", registered_at=datetime.date(2025, 1, 1)
    )
    return {"branches": (branch, other), "book": book, "members": (ada, bob)}


def test_overdue_notifications_once_per_open_overdue_loan_per_day(library):
    ada, bob = library["members"]
    book = library["book"]
    old = datetime.date(2026, 1, 10)  # 22 days before the slot: overdue
    overdue_ada = Loan.objects.create(book=book, member=ada, pickup_date=old)
    overdue_bob = Loan.objects.create(book=book, member=bob, pickup_date=old)
    Loan.objects.create(  # returned: no reminder
        book=book, member=ada, pickup_date=old, return_date=datetime.date(2026, 1, 20)
    )
    Loan.objects.create(  # 14 days: not yet overdue
        book=book, member=bob, pickup_date=datetime.date(2026, 1, 18)
    )
    assert overdue_notifications_send(slot=SLOT) == 2
    assert overdue_notifications_send(slot=SLOT) == 0  # the same day: idempotent
    reminders = Notification.objects.filter(kind="overdue")
    assert sorted((n.member_id, n.loan_id) for n in reminders) == sorted(
        [(ada.pk, overdue_ada.pk), (bob.pk, overdue_bob.pk)]
    )
    assert all("was due back 2026-01-24" in n.text for n in reminders)
    # The next day reminds again, once per loan; the 14-day loan is now overdue too.
    assert overdue_notifications_send(slot=SLOT + datetime.timedelta(days=1)) == 3
    assert Notification.objects.filter(kind="overdue").count() == 5


def test_inventory_summary_recomputes_every_branch(library):
    branch, other = library["branches"]
    BranchStock.objects.create(branch=branch, on_shelf_total=99, last_message_id=41)
    assert inventory_summary_refresh() == 2
    summaries = {s.branch_id: s for s in BranchStock.objects.all()}
    assert (summaries[branch.pk].on_shelf_total, summaries[branch.pk].titles) == (5, 2)
    assert (summaries[other.pk].on_shelf_total, summaries[other.pk].titles) == (4, 1)
    assert summaries[branch.pk].last_message_id == 41  # left as the spine set it


def test_prune_job_deletes_only_old_finished_statuses(
    redis_client, django_capture_on_commit_callbacks
):
    old = timezone.now() - datetime.timedelta(days=8)
    finished = JobStatus.objects.create(
        kind="lab", name="x", state="done", finished_at=old
    )
    running = JobStatus.objects.create(kind="lab", name="y", state="running")
    recent = JobStatus.objects.create(
        kind="lab", name="z", state="done", finished_at=timezone.now()
    )
    queue = django_rq.get_queue("default")
    with django_capture_on_commit_callbacks(execute=True):
        queue.enqueue("jobs.tasks.jobstatus_prune", older_than_days=7)
    (job,) = queue.jobs
    django_rq.get_worker("default", worker_class="rq.SimpleWorker").work(burst=True)
    job.refresh()
    assert job.return_value() == 1
    remaining = set(JobStatus.objects.values_list("pk", flat=True))
    assert remaining == {running.pk, recent.pk}
    assert finished.pk not in remaining
