"""Failure as a feature: real drain processes killed with SIGKILL, Redis flushed.

These start `manage.py rqworker` or `manage.py drainer` processes (each test runs on
both: the drainer is what the Procfiles run, the rq drain job its fallback) and
`manage.py scheduler` against this test run's database and Redis, so they need
committed data (transaction=True).
"""

from __future__ import annotations

import datetime
import random
import subprocess
import sys
import time

import pytest
from django.db.models import Count

from config.processes import ROOT, child_environment, kill, start_manage, wait_until
from library.models import Book, Branch, Loan, Member, Notification
from library.services import loan_issue
from messaging.models import DeadLetter, Delivery, OutboxMessage
from messaging.registry import subscriptions_for

# Claims differ by database (SKIP LOCKED, compare-and-set): killed on each.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    pytest.mark.each_database,
]
LEASE_SECONDS = 2
# The two ways the outbox is drained: an rq worker forking a drain job per nudge,
# and the long-lived drainer (messaging.drainer).
DRAIN_PROCESSES = {"rqworker": ("rqworker", "messaging"), "drainer": ("drainer",)}
drain_process = pytest.mark.parametrize("drain", sorted(DRAIN_PROCESSES))


def start(*args: str) -> subprocess.Popen[bytes]:
    env = {**child_environment(), "MESSAGING_LEASE_SECONDS": str(LEASE_SECONDS)}
    return start_manage(*args, env={**env, "LOG_LEVEL": "WARNING"})


def make_library(books: int, members: int) -> None:
    Branch.objects.bulk_create([Branch(id=i, name=f"B{i}", city="C") for i in (1, 2)])
    Book.objects.bulk_create(
        [
            Book(
                id=n, title=f"Book {n}", author="A", branch_id=n % 2 + 1, on_shelf=1_000
            )
            for n in range(1, books + 1)
        ]
    )
    Member.objects.bulk_create(
        [
            Member(
                id=n,
                first_name="M",
                last_name=str(n),
                registered_at=datetime.date(2024, 1, 1),
            )
            for n in range(1, members + 1)
        ]
    )


def settled() -> bool:
    """Every message relayed and no delivery pending. (Deliveries alone are not
    enough: messages not relayed yet have none.)"""
    return (
        not OutboxMessage.objects.filter(relayed_at__isnull=True).exists()
        and not Delivery.objects.filter(status="pending").exists()
        and Delivery.objects.exists()
    )


def wait_until_settled(deadline_s: float) -> None:
    wait_until(settled, "every delivery done or dead", timeout=deadline_s)


@drain_process
def test_sigkilled_workers_leave_exactly_one_notification_per_loan(redis_client, drain):
    loans = 2000
    make_library(books=50, members=100)
    command = DRAIN_PROCESSES[drain]
    workers = [start(*command) for _ in range(2)]
    scheduler = start("scheduler")
    rng = random.Random(20250720)
    try:
        kills = 0
        for n in range(loans):
            loan_issue(book_id=n % 50 + 1, member_id=n % 100 + 1)
            if n % 250 == 125:  # kill one worker mid-drain, then replace it
                victim = rng.randrange(len(workers))
                kill(workers[victim])
                workers[victim] = start(*command)
                kills += 1
        for _ in range(3):  # and a few more while the backlog drains
            time.sleep(rng.uniform(0.3, 1.0))
            victim = rng.randrange(len(workers))
            kill(workers[victim])
            workers[victim] = start(*command)
            kills += 1
        wait_until_settled(deadline_s=240)
    finally:
        for process in [*workers, scheduler]:
            kill(process)
    assert kills == 11
    assert Loan.objects.count() == loans
    per_loan = Notification.objects.values("loan_id").annotate(n=Count("id"))
    assert per_loan.count() == loans
    assert {row["n"] for row in per_loan} == {1}
    assert not DeadLetter.objects.exists()
    per_loan_copies = len(subscriptions_for("loan_issued"))
    assert Delivery.objects.filter(status="done").count() == per_loan_copies * loans


@drain_process
def test_redis_flushed_mid_run_delays_but_loses_nothing(redis_client, drain):
    make_library(books=10, members=10)
    for n in range(60):
        loan_issue(book_id=n % 10 + 1, member_id=n % 10 + 1)
    # The nudges are in Redis now; lose them, as a Redis restarted without data would.
    redis_client.flushdb()
    worker = start(*DRAIN_PROCESSES[drain])
    scheduler = start("scheduler")  # its sweep finds the unrelayed messages
    try:
        wait_until_settled(deadline_s=120)
        for n in range(20):  # and the system keeps working after the loss
            loan_issue(book_id=n % 10 + 1, member_id=1)
        redis_client.flushdb()
        time.sleep(0.2)
        wait_until_settled(deadline_s=120)
    finally:
        kill(worker)
        kill(scheduler)
    assert Notification.objects.count() == 80
    assert Delivery.objects.filter(status="done").count() == 80 * len(
        subscriptions_for("loan_issued")
    )


@drain_process
def test_message_that_kills_its_worker_is_isolated_and_others_flow(
    redis_client, tmp_path, drain
):
    make_library(books=5, members=5)
    # The notification handler below SIGKILLs its own process for loans of book 3.
    env_marker = tmp_path / "poison"
    env_marker.write_text("3")
    for n in range(10):
        loan_issue(book_id=n % 5 + 1, member_id=1)
    env = {
        **child_environment(),
        "MESSAGING_LEASE_SECONDS": "1",
        "LOG_LEVEL": "WARNING",
        "LIBRARY_POISON_BOOK_FILE": str(env_marker),
    }
    code = (
        "import django; django.setup();"
        "from messaging.tests import poison; poison.install();"
        "from django.core.management import call_command;"
        f"call_command(*{DRAIN_PROCESSES[drain]!r})"
    )

    def start_poisonable() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    copies = len(subscriptions_for("loan_issued"))
    worker = start_poisonable()
    scheduler = start("scheduler")

    def supervised_until_settled() -> bool:
        nonlocal worker
        if worker.poll() is not None:  # killed by the poison: a supervisor restarts it
            worker = start_poisonable()
        return Delivery.objects.count() == 10 * copies and not (
            Delivery.objects.filter(status="pending").exists()
        )

    try:
        # Each death costs a lease and a worker's start: generous, for a loaded machine.
        wait_until(supervised_until_settled, "the poison isolated", timeout=240)
    finally:
        kill(worker)
        kill(scheduler)
    dead = list(DeadLetter.objects.all())
    assert len(dead) == 2  # the two loans of book 3, and nothing else
    assert {d.subscription for d in dead} == {"notification"}
    assert {d.body["book_id"] for d in dead} == {3}
    assert all("worker died" in d.last_error for d in dead)
    assert Notification.objects.count() == 8
    assert (
        Delivery.objects.filter(subscription="notification", status="dead").count() == 2
    )
