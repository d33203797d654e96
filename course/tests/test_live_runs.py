"""Live runs: the harness's workers and waits, the live box on the lesson page, a
learner's live run through a lab worker, and its progress.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from course.labs.harness import live as harness
from course.labs.harness.base import LabError
from course.models import ProbeEffect
from course.services import labwork
from course.tests.labs.lab_results import assert_no_children_left
from course.tests.labwork import run_waiting
from jobs.models import JobStatus


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_live_wait_gives_a_one_line_reason():
    with pytest.raises(LabError, match=r"live: nothing did not settle in 0.1 s"):
        harness.wait_until(lambda: False, what="nothing", timeout=0.1)


def learner_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("learner", password="x"))
    return client


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_lab_page_offers_the_live_checkbox(client):
    assert (
        "Also measure the live system"
        in client.get("/course/dead-letter-queues/").content.decode()
    )


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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
