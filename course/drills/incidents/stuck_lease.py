"""Drill: a scheduled task whose lease is held by a process that died.

Seeding (in the sandbox): ``overdue_notifications`` (daily at 06:00 UTC, one
reminder per overdue loan and day) ran normally on the day before. For its latest
slot, a run took the task's lease and its process was killed mid-run: the lease,
in Redis, still names that process (host, pid) and outlives it. The drill gives it
half an hour (the task's own lease is a minute; a holder renews it while it runs),
so it does not lapse while you look. The scheduled run of the slot found the lease
held and was skipped, as it must be (two runs must never overlap), and the day's
reminders were never sent.

Levers in the *Scheduled tasks* admin: the task's page names the holder and says
whether it still runs; **Break lease…** deletes a lease whose holder is shown dead
(``jobs.scheduler_actions``); **Run now…** runs the current slot under the lease
(refused while it is held). A skipped slot is not made up by itself.

The checker: the day's reminders sent, one per overdue loan and none twice, the
lease no longer held by the dead process, and the task's state showing the run.
"""

from __future__ import annotations

import datetime
from typing import Final

from django.db.models import Count
from django.utils import timezone

from course.drills.incidents.common import (
    Findings,
    Verdict,
    dead_process_token,
    settle,
)
from jobs.holders import holder_state
from jobs.locks import lease_holder, lock_key
from jobs.models import ScheduledTaskAction, ScheduledTaskState
from jobs.recurrence import current_slot, next_run
from jobs.scheduler import TASKS_BY_NAME, lease_name, schedule_redis
from jobs.scheduler_actions import QUEUED, RUNNING
from library.models import Book, Loan, Member, Notification
from library.services import loan_issue
from library.services.notices import (
    LOAN_PERIOD_DAYS,
    overdue_notifications_send,
    overdue_source_id,
)

TASK: Final = "overdue_notifications"
HELD_FOR: Final = datetime.timedelta(minutes=30)
AT_LEAST_OVERDUE: Final = 5


def _slot(now: datetime.datetime | None = None) -> datetime.datetime:
    return current_slot(TASKS_BY_NAME[TASK].recurrence, now or timezone.now())


def _overdue(day: datetime.date) -> list[int]:
    """The open loans past their period on ``day`` (the reminders' subjects)."""
    return list(
        Loan.objects.filter(
            return_date__isnull=True,
            pickup_date__lt=day - datetime.timedelta(days=LOAN_PERIOD_DAYS),
        ).values_list("pk", flat=True)
    )


def _overdue_enough(day: datetime.date) -> None:
    """Make sure a few loans are overdue on ``day`` (the demo library has some)."""
    missing = AT_LEAST_OVERDUE - len(_overdue(day))
    if missing <= 0:
        return
    books = Book.objects.filter(on_shelf__gte=1).order_by("-id")[:missing]
    members = Member.objects.order_by("-id")[:missing]
    for book, member in zip(books, members, strict=True):
        loan_issue(
            book_id=book.pk,
            member_id=member.pk,
            pickup_date=day - datetime.timedelta(days=LOAN_PERIOD_DAYS + 3),
        )


def seed() -> dict[str, str]:
    task = TASKS_BY_NAME[TASK]
    now = timezone.now()
    slot = _slot(now)
    previous = _slot(slot - datetime.timedelta(seconds=1))
    _overdue_enough(slot.astimezone(datetime.UTC).date())
    overdue_notifications_send(slot=previous)  # the day before ran as usual
    owner = dead_process_token()
    schedule_redis().set(
        lock_key(lease_name(TASK)), owner, px=int(HELD_FOR.total_seconds() * 1000)
    )
    ScheduledTaskState.objects.update_or_create(
        name=TASK,
        defaults={
            "next_run_at": next_run(task.recurrence, now),
            "last_run_at": previous,
            "last_started_at": previous + datetime.timedelta(seconds=1),
            "last_finished_at": previous + datetime.timedelta(seconds=2),
            "last_outcome": f"skipped (locked by {owner})"[:200],
            "runs_total": 41,
            "skipped_total": 1,
        },
    )
    return {"The skipped slot": f"{slot:%Y-%m-%d %H:%M} UTC of {TASK}"}


def _run_in_flight() -> bool:
    return ScheduledTaskAction.objects.filter(
        task_id=TASK, outcome__in=[QUEUED, RUNNING]
    ).exists()


def check() -> Verdict:
    still = settle(_run_in_flight)
    found = Findings()
    slot = _slot()
    day = slot.astimezone(datetime.UTC).date()
    loans = _overdue(day)
    wanted = [overdue_source_id(loan, day) for loan in loans]
    sent = Notification.objects.filter(source_message_id__in=wanted)
    found.add(
        sent.count() == len(wanted) > 0,
        f"The reminders of {day} went out: {len(wanted)} overdue loans, one each.",
        f"{len(wanted) - sent.count()} of the {len(wanted)} reminders of {day} are "
        "missing: the slot was skipped and nothing has run it since.",
    )
    twice = sent.values("source_message_id").annotate(n=Count("id")).filter(n__gt=1)
    found.add(
        not twice.exists(),
        "No member got the same day's reminder twice.",
        "Some members got the same day's reminder more than once.",
    )
    holder = lease_holder(schedule_redis(), lease_name(TASK), now=timezone.now())
    dead = holder is not None and holder_state(holder.owner).dead
    found.add(
        not dead,
        "The task's lease is not held by a dead process.",
        f"The task's lease is still held by {holder.owner if holder else '?'}, a "
        "process that no longer runs: every run until it lapses is skipped.",
    )
    state = ScheduledTaskState.objects.filter(name=TASK).first()
    ran = (
        state is not None
        and state.last_run_at == slot
        and state.last_outcome.startswith("ran")
    )
    found.add(
        ran,
        f"The task's page shows the slot {slot:%Y-%m-%d %H:%M} UTC as run.",
        f"The task's page does not show the slot {slot:%Y-%m-%d %H:%M} UTC as run "
        f"(last outcome: {state.last_outcome if state else 'none'}).",
    )
    return found.verdict(settling=still)
