"""A lab run asked for on the page waits in the database and a lab worker runs it."""

import re
import uuid

import pytest
from django.test import Client, override_settings

from course.labs.registry import lab_get
from course.models import LabRun
from course.services.labqueue import Requester, lab_run_request
from course.services.labwake import WAKE_CHANNEL
from course.services.labwork import lab_run_carry_out, lab_run_take
from course.tests.labs.lab_results import lab_json
from course.tests.labwork import TEST_WORKER, run_waiting
from jobs.models import JobStatus

pytestmark = pytest.mark.django_db

ANON = Requester(visitor="anon:test", client="c-test")


def test_post_records_a_waiting_run_and_wakes_the_workers_after_commit(
    client, redis_client, django_capture_on_commit_callbacks
):
    listener = redis_client.pubsub(ignore_subscribe_messages=True)
    listener.subscribe(WAKE_CHANNEL)
    listener.get_message(timeout=1)  # the subscription's own confirmation
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/course/cache-layers/run", {"requests": "300"})
    assert listener.get_message(timeout=0.2) is None  # nothing before the commit
    job = JobStatus.objects.get()
    assert response.status_code == 303
    assert response["Location"] == f"/course/cache-layers/?job={job.id}"
    assert (job.kind, job.name, job.state) == ("lab", "cache-layers", "queued")
    assert job.params["requests"] == 300
    assert job.params["seed"] == 20250729
    record = LabRun.objects.get()
    assert record.cost == 0.5  # half the default run's requests
    assert record.visitor.startswith("anon:")
    for callback in callbacks:
        callback()
    assert listener.get_message(timeout=5)["data"] == b"1"
    listener.close()


def test_json_post_answers_202_with_the_job(client, redis_client):
    response = client.post(
        "/course/message-queues/run",
        {"visibility": "45", "consumers": "1,2"},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 202
    body = response.json()
    job = JobStatus.objects.get(pk=body["job"])
    assert body["status_url"] == f"/jobs/{job.id}/status"
    assert body["lesson_url"] == f"/course/message-queues/?job={job.id}"
    assert (body["joined"], body["reused"]) == (False, False)
    assert job.params["consumers"] == [1, 2]


def test_bad_parameters_rerender_the_form_with_400(client, redis_client):
    response = client.post("/course/message-queues/run", {"visibility": "0"})
    assert response.status_code == 400
    assert b"visibility: must be greater than 0" in response.content
    assert JobStatus.objects.count() == 0


def test_bad_parameters_as_json(client, redis_client):
    response = client.post(
        "/course/cache-layers/run",
        {"requests": "many", "users": "0"},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors["requests"] == ["requests: 'many' is not a whole number"]
    assert errors["users"] == ["users: must be at least 1, got 0"]


def test_run_requires_csrf_token(redis_client):
    strict = Client(enforce_csrf_checks=True)
    page = strict.get("/course/cache-layers/")
    assert strict.post("/course/cache-layers/run", {}).status_code == 403
    # The token the page carries, as a browser reads it: an anonymous lesson page is
    # rendered once with a placeholder that each answer fills (course.lesson_cache).
    found = re.search(
        r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()
    )
    assert found is not None
    token = found.group(1)
    response = strict.post("/course/cache-layers/run", {"csrfmiddlewaretoken": token})
    assert response.status_code == 303


def test_run_of_an_unknown_lesson_is_404(client):
    assert client.post("/course/nope/run", {}).status_code == 404
    assert client.get("/course/cache-layers/run").status_code == 405


@pytest.mark.parametrize(
    ("slug", "overrides"),
    [
        ("cache-layers", {}),
        ("cache-layers", {"requests": "900", "edge_capacity": "25"}),
        ("message-queues", {}),
        ("message-queues", {"visibility": "12", "consumers": "1,5", "rounds": "9"}),
    ],
)
def test_a_worker_slot_runs_the_lab_to_the_commands_result(
    client, redis_client, slug, overrides
):
    response = client.post(f"/course/{slug}/run", overrides)
    assert response.status_code == 303
    assert run_waiting() == 1
    job = JobStatus.objects.get()
    assert job.state == "done", job.error
    assert job.progress == 100.0
    assert job.started_at is not None
    assert job.finished_at is not None
    assert (job.lease_owner, job.leased_until) == ("", None)
    # queued(1) + claim + several progress writes + finish
    assert job.version >= 4
    sets = [
        arg for name, value in overrides.items() for arg in ("--set", f"{name}={value}")
    ]
    assert job.result == lab_json(slug, *sets)


def test_smuggled_bad_params_end_as_failed_with_readable_error(redis_client):
    asked = lab_run_request(lab=lab_get("message-queues"), params={}, requester=ANON)
    assert asked.job is not None
    JobStatus.objects.filter(pk=asked.job.pk).update(params={"visibility": 0})
    assert run_waiting() == 1
    job = JobStatus.objects.get(pk=asked.job.pk)
    assert job.state == "failed"
    assert job.error == "visibility: must be greater than 0, got 0"
    assert "Traceback" not in job.error


def test_unknown_lab_name_in_row_fails(redis_client):
    asked = lab_run_request(lab=lab_get("message-queues"), params={}, requester=ANON)
    assert asked.job is not None
    JobStatus.objects.filter(pk=asked.job.pk).update(name="no-such-lab")
    assert run_waiting() == 1
    job = JobStatus.objects.get(pk=asked.job.pk)
    assert job.state == "failed"
    assert job.error.startswith("no lab named 'no-such-lab'")


@pytest.fixture
def broken_cache_layers():
    """Make the cache-layers model crash for one test (Lab is frozen: swap by hand)."""
    lab = lab_get("cache-layers")
    original = lab.model

    def broken(params, progress):
        progress(0.5, "about to fail")
        raise ZeroDivisionError("boom")

    object.__setattr__(lab, "model", broken)
    yield lab
    object.__setattr__(lab, "model", original)


def test_a_crash_inside_the_model_is_reported_without_traceback(
    redis_client, broken_cache_layers
):
    asked = lab_run_request(lab=broken_cache_layers, params={}, requester=ANON)
    assert asked.job is not None
    run_waiting()
    job = JobStatus.objects.get(pk=asked.job.pk)
    assert job.state == "failed"
    assert job.error == "The lab stopped with an internal error (ZeroDivisionError)."


def test_a_taken_run_is_never_taken_again(redis_client):
    asked = lab_run_request(lab=lab_get("cache-layers"), params={}, requester=ANON)
    assert asked.job is not None
    first = lab_run_take(live=False, owner="one:1", lease_s=30)
    assert first is not None
    assert first.pk == asked.job.pk
    assert lab_run_take(live=False, owner="two:2", lease_s=30) is None
    assert lab_run_carry_out(job=first, owner="one:1") == "done"
    assert run_waiting() == 0


def test_a_late_writer_that_lost_its_run_writes_nothing(redis_client):
    asked = lab_run_request(lab=lab_get("cache-layers"), params={}, requester=ANON)
    taken = lab_run_take(live=False, owner="slow:1", lease_s=30)
    assert asked.job is not None
    assert taken is not None
    JobStatus.objects.filter(pk=taken.pk).update(
        state="failed", lease_owner="", error="its lease ran out"
    )
    lab_run_carry_out(job=taken, owner="slow:1")
    job = JobStatus.objects.get(pk=taken.pk)
    assert (job.state, job.error, job.result) == ("failed", "its lease ran out", None)


@override_settings(REDIS_URL="redis://127.0.0.1:1/0")
def test_a_run_asked_while_redis_is_away_is_kept_and_runs(client):
    # Nothing of a run lives in Redis: the wake-up call fails (logged), the run
    # waits in the database, and the workers' poll finds it.
    response = client.post(
        "/course/cache-layers/run", {}, headers={"accept": "application/json"}
    )
    assert response.status_code == 202
    job_id = uuid.UUID(response.json()["job"])
    assert run_waiting(name=TEST_WORKER) == 1
    assert JobStatus.objects.get(pk=job_id).state == "done"
