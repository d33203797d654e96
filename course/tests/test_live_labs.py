"""Live parts of the messaging labs, on real rq worker processes.

Each live part starts its own ``manage.py`` workers against this test run's database
and Redis (so the data must be committed: transaction=True), kills work-horses with
SIGKILL where the lesson says a process dies, and must reach the course's counts.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from course.labs.harness import live as harness
from course.labs.harness.base import LabError, Tables
from course.labs.registry import LABS, lab_get
from course.models import ProbeEffect
from course.services import labwork
from course.tests.labwork import run_waiting
from jobs.models import JobStatus
from library.models import Book, Branch, Loan, Member
from messaging.models import DeadLetter
from messaging.registry import MessageType, subscriptions_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def live_tables(slug: str, **overrides: Any) -> Tables:
    lab = lab_get(slug)
    return lab.run(lab.validate(overrides), live=True)["tables"]


def rows(tables: Tables, name: str) -> list[list[Any]]:
    return tables[name]["rows"]


def assert_no_children_left() -> None:
    # The harness stops (and reaps) every worker and work-horse it started.
    assert harness.child_pids(os.getpid()) == []


@pytest.mark.each_database  # claims: SKIP LOCKED or compare-and-set
def test_delivery_semantics_live_reaches_the_course_counts(redis_client):
    tables = live_tables("delivery-semantics")
    assert tables["live_modes"]["columns"] == tables["modes"]["columns"]
    by_mode = {row[0]: row[1:] for row in rows(tables, "live_modes")}
    modes = ["at-most-once", "at-least-once", "deduplication"]
    assert list(by_mode) == modes
    # (lost, repeated) per mode, then (delivered, effect) per mode
    assert [by_mode[mode][2:] for mode in modes] == [[3, 0], [0, 3], [0, 0]]
    assert [by_mode[mode][:2] for mode in modes] == [[12, 9], [15, 15], [15, 12]]
    assert rows(tables, "live_modes") == rows(tables, "modes")
    assert_no_children_left()
    assert not list(redis_client.scan_iter(match="*lab-live-*"))


@pytest.mark.each_database  # claims: SKIP LOCKED or compare-and-set
def test_message_queues_live_redelivers_after_the_lease(redis_client):
    tables = live_tables("message-queues")
    live = rows(tables, "live_unacknowledged")
    assert [(r[0], r[2], r[3]) for r in live] == [
        (1, 1, "acknowledged"),
        (2, 1, "died holding the lease"),
        (3, 1, "acknowledged"),
        (2, 2, "acknowledged after the lease ran out"),
    ]
    assert live[1][1] != live[3][1]  # another process took the abandoned message
    [[messages, deliveries, lease_s, after_s]] = rows(tables, "live_deliveries")
    assert (messages, deliveries, lease_s) == (3, 4, 2)
    assert after_s >= lease_s
    # the model's own total for the same experiment
    assert rows(tables, "deliveries")[0][3] == deliveries
    assert_no_children_left()


@pytest.mark.each_database  # claims: SKIP LOCKED or compare-and-set
def test_dead_letter_queues_live_drains_isolates_and_redrives(redis_client):
    tables = live_tables("dead-letter-queues")
    assert rows(tables, "live_redrive") == [
        ["first drain", 18, 2, 24],
        ["after redriving 2", 20, 0, 2],
    ]
    letters = rows(tables, "live_dead_letters")
    assert [(r[0], r[1], r[2], r[3]) for r in letters] == [
        (7, "lab_probe", 3, "lab_probe"),
        (13, "lab_probe", 3, "lab_probe"),
    ]
    assert all("ProbeFailure" in r[5] and '"fail":true' in r[4] for r in letters)
    assert DeadLetter.objects.filter(redriven_at__isnull=True).count() == 0
    assert_no_children_left()


def test_dead_letter_queues_live_says_it_uses_the_system_threshold(redis_client):
    tables = live_tables("dead-letter-queues", messages=6, permanent=[2], threshold=5)
    first, after = rows(tables, "live_redrive")
    assert first == ["first drain (system threshold 3, not the parameter)", 5, 1, 8]
    assert after == ["after redriving 1", 6, 0, 1]


@pytest.mark.each_database  # claims: SKIP LOCKED or compare-and-set
def test_poison_live_isolates_the_worker_killer_at_claim_time(redis_client):
    tables = live_tables("poison-messages-and-retry")
    assert rows(tables, "live_counter_position") == [
        ["at claim (live system)", 2, 4, 1]
    ]
    claims = {r[0]: r for r in rows(tables, "live_claims")}
    assert claims[3][1:] == [
        3,
        "dead letter: the worker died during 2 earlier attempt(s)",
    ]
    assert all(claims[n][2] == "done" for n in (1, 2, 4, 5))
    # The model's row with the counter at delivery isolates as well, a death earlier.
    model = {r[0]: r for r in rows(tables, "counter_position")}["at delivery"]
    assert (model[4], model[5]) == (4, 1)
    assert_no_children_left()


def make_library() -> list[int]:
    branch = Branch.objects.create(name="Central", city="C")
    books = [
        Book.objects.create(title=f"Book {n}", author="A", branch=branch, on_shelf=2)
        for n in range(3)
    ]
    for n in range(3):
        Member.objects.create(
            first_name="M", last_name=str(n), registered_at=datetime.date(2024, 1, 1)
        )
    return [book.pk for book in books]


def test_rationale_live_in_memory_loses_side_jobs_the_outbox_keeps_them(
    redis_client,
):
    books = make_library()
    tables = live_tables("rationale-for-asynchronous-processing")
    # A loan's side jobs are the subscriptions its message reaches: three in the
    # lesson; the system's count is whatever its registry holds.
    per_loan = [s.name for s in subscriptions_for(MessageType.LOAN_ISSUED)]
    jobs = 3 * len(per_loan)
    assert rows(tables, "live_durability") == [
        ["in memory", 3, 0],
        ["outbox", 3, jobs],
    ]
    if len(per_loan) == 3:
        assert rows(tables, "live_durability") == rows(tables, "durability")
    names = " ".join(per_loan)
    assert rows(tables, "live_side_jobs") == [
        ["in memory", names, jobs, 0, 0, 0],
        ["outbox", names, jobs, None, jobs, jobs],
    ]
    # Six loans were issued by the killed children and all were returned.
    assert Loan.objects.count() == 6
    assert not Loan.objects.filter(return_date__isnull=True).exists()
    assert list(
        Book.objects.filter(pk__in=books).values_list("on_shelf", flat=True)
    ) == [2, 2, 2]
    assert_no_children_left()


def test_rationale_live_without_library_data_says_what_is_missing(redis_client):
    with pytest.raises(LabError, match="seed_library"):
        live_tables("rationale-for-asynchronous-processing")


def test_workers_are_stopped_when_the_live_block_fails(redis_client):
    run = harness.new_run_id()
    started: list[harness.LiveSystem] = []

    def fail_inside() -> None:
        with harness.live_system(run=run, progress=lambda f, m: None) as system:
            started.append(system)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    [system] = started
    assert len(system.processes) == harness.WORKERS
    assert all(process.poll() is not None for process in system.processes)
    assert_no_children_left()


def test_live_wait_gives_a_one_line_reason():
    with pytest.raises(LabError, match=r"live: nothing did not settle in 0.1 s"):
        harness.wait_until(lambda: False, what="nothing", timeout=0.1)


# --- the lesson page -----------------------------------------------------------------


def learner_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("learner", password="x"))
    return client


def test_live_checkbox_is_disabled_and_refused_without_an_account(client, redis_client):
    page = client.get("/course/dead-letter-queues/").content.decode()
    assert "Also measure the live system" in page
    assert 'name="live"' in page
    assert "disabled" in page
    assert "needs an account" in page
    response = client.post(
        "/course/dead-letter-queues/run",
        {"live": "on"},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 403
    assert "needs an account" in response.json()["errors"]["live"][0]
    assert (
        client.post("/course/dead-letter-queues/run", {"live": "on"}).status_code == 403
    )
    assert not JobStatus.objects.exists()
    # Without the box the page runs the model as before.
    assert client.post("/course/dead-letter-queues/run", {}).status_code == 303


def test_lab_without_live_part_shows_no_checkbox(client, monkeypatch):
    # Every lab has a live part now: take one away to see the page without it.
    monkeypatch.setitem(LABS, "cache-layers", replace(LABS["cache-layers"], live=None))
    page = client.get("/course/cache-layers/").content.decode()
    assert "Also measure the live system" not in page
    assert (
        "Also measure the live system"
        in client.get("/course/dead-letter-queues/").content.decode()
    )


def test_a_learners_live_run_goes_through_a_lab_worker(redis_client):
    client = learner_client()
    page = client.get("/course/dead-letter-queues/").content.decode()
    assert "needs an account" not in page
    response = client.post(
        "/course/dead-letter-queues/run",
        {"live": "on", "messages": "10", "permanent": "4"},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 202
    job = JobStatus.objects.get()
    assert job.params["_live"] is True
    assert job.params["messages"] == 10

    # A live slot runs the lab's live part in a sandbox (course.sandbox): the same
    # counts, none of the rows here.
    assert run_waiting(live=True) == 1

    job.refresh_from_db()
    assert job.state == JobStatus.State.DONE, job.error
    assert job.result is not None
    assert "_live" not in job.result["params"]
    assert job.result["tables"]["live_redrive"]["rows"] == [
        ["first drain", 9, 1, 12],
        ["after redriving 1", 10, 0, 1],
    ]
    assert job.result["tables"]["retry"]  # the model's tables are there too
    assert job.progress == 100.0
    # Reloading the finished run keeps the box ticked.
    page = client.get(f"/course/dead-letter-queues/?job={job.id}").content.decode()
    assert 'id="id_live" checked' in page
    assert not ProbeEffect.objects.exists()  # the effects were the sandbox's


def test_live_progress_follows_the_model_and_never_moves_back(monkeypatch):
    monkeypatch.setattr(labwork, "_REPORT_EVERY_S", 0.0)  # every report written
    job = JobStatus.objects.create(
        kind="lab", name="dead-letter-queues", state="running", lease_owner="w:1"
    )
    report = labwork._reporter(job.id, "w:1", live=True)
    seen = []
    for fraction, label in [
        (0.0, "model starts"),
        (0.8, "model ends"),
        (0.02, "live: starting 2 rq worker processes"),
        (0.5, "live: the cause is fixed; redrive"),
        (1.0, "done"),
    ]:
        report(fraction, label)
        job.refresh_from_db()
        seen.append((job.progress, job.message))
    assert [percent for percent, _ in seen] == sorted(percent for percent, _ in seen)
    assert seen[2] == (26.4, "live: starting 2 rq worker processes")
    assert seen[-1][0] == 95.0
