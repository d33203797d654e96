import uuid
from typing import Any

import django_rq
import pytest
from django.test import Client
from django.utils.module_loading import import_string
from rq import SimpleWorker

from course.labs.registry import LABS, lab_get
from course.lessons import LESSONS
from course.services import RUN_LAB_TASK, lab_run_enqueue
from course.tasks import run_lab
from course.tests.lab_results import lab_json
from jobs.models import JobStatus

pytestmark = pytest.mark.django_db


def queued_ids() -> list[str]:
    return django_rq.get_queue("labs").job_ids


def work_burst() -> None:
    # SimpleWorker runs jobs in this process, inside the test's transaction.
    worker_class: Any = SimpleWorker
    django_rq.get_worker("labs", worker_class=worker_class).work(burst=True)


def test_post_creates_job_and_enqueues_after_commit(
    client, redis_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/course/cache-layers/run", {"requests": "300"})
        job = JobStatus.objects.get()
        assert queued_ids() == []  # nothing reaches Redis before the commit
    assert response.status_code == 303
    assert response["Location"] == f"/course/cache-layers/?job={job.id}"
    assert (job.kind, job.name, job.state) == ("lab", "cache-layers", "queued")
    assert job.params["requests"] == 300
    assert job.params["seed"] == 20250729
    for callback in callbacks:
        callback()
    assert queued_ids() == [f"lab-{job.id}"]


def test_json_post_answers_202_with_the_job(
    client, redis_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
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
    assert body["version"] == 1
    assert job.params["consumers"] == [1, 2]
    assert queued_ids() == [f"lab-{job.id}"]


def test_bad_parameters_rerender_the_form_with_400(client, redis_client):
    response = client.post("/course/message-queues/run", {"visibility": "0"})
    assert response.status_code == 400
    assert b"visibility: must be greater than 0" in response.content
    assert JobStatus.objects.count() == 0
    assert queued_ids() == []


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
    token = page.context["csrf_token"]
    response = strict.post("/course/cache-layers/run", {"csrfmiddlewaretoken": token})
    assert response.status_code == 303


def test_run_of_unbuilt_lab_or_unknown_lesson_is_404(client, monkeypatch):
    # Every lesson has its lab now: take one away to see the answer without it.
    unbuilt = LESSONS[-1].slug
    monkeypatch.delitem(LABS, unbuilt)
    assert client.post(f"/course/{unbuilt}/run", {}).status_code == 404
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
def test_burst_worker_runs_the_lab_to_the_commands_result(
    client, redis_client, django_capture_on_commit_callbacks, slug, overrides
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/course/{slug}/run", overrides)
    assert response.status_code == 303
    work_burst()
    job = JobStatus.objects.get()
    assert job.state == "done", job.error
    assert job.progress == 100.0
    assert job.started_at is not None
    assert job.finished_at is not None
    # queued(1) + start + several progress writes + finish
    assert job.version >= 6
    sets = [
        arg for name, value in overrides.items() for arg in ("--set", f"{name}={value}")
    ]
    assert job.result == lab_json(slug, *sets)


def test_smuggled_bad_params_end_as_failed_with_readable_error(
    redis_client, django_capture_on_commit_callbacks
):
    job = JobStatus.objects.create(
        kind="lab", name="message-queues", params={"visibility": 0}
    )
    with django_capture_on_commit_callbacks(execute=True):
        django_rq.get_queue("labs").enqueue(run_lab, str(job.id))
    work_burst()
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.error == "visibility: must be greater than 0, got 0"
    assert "Traceback" not in job.error


def test_unknown_lab_name_in_row_fails(redis_client):
    job = JobStatus.objects.create(kind="lab", name="no-such-lab", params={})
    run_lab(str(job.id))
    job.refresh_from_db()
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
    job = lab_run_enqueue(lab=broken_cache_layers, params={}, user=None)
    run_lab(str(job.id))
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.error == "The lab stopped with an internal error (ZeroDivisionError)."


def test_a_finished_job_is_not_run_again(redis_client):
    job = JobStatus.objects.create(
        kind="lab", name="cache-layers", params={}, state="done"
    )
    run_lab(str(job.id))
    job.refresh_from_db()
    assert job.state == "done"
    assert job.version == 1


def test_missing_job_is_ignored():
    run_lab(str(uuid.uuid4()))  # logs a warning, raises nothing


def test_the_enqueued_task_names_the_worker_entry_point():
    # course.services enqueues by dotted path (course.tasks imports the services).
    assert import_string(RUN_LAB_TASK) is run_lab
