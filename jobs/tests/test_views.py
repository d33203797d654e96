import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from jobs.models import JobStatus
from jobs.services import jobstatus_progress

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return get_user_model().objects.create_user("starter")


@pytest.fixture
def job(owner):
    # Of a kind with no rule of its own: its starter's alone (jobs.access).
    return JobStatus.objects.create(
        kind="test", name="cache-layers", params={}, created_by=owner
    )


@pytest.fixture
def client(owner):
    client = Client()
    client.force_login(owner)
    return client


def url(job_id: object, version: object = None) -> str:
    base = f"/jobs/{job_id}/status"
    return base if version is None else f"{base}?version={version}"


def test_same_version_is_204(client, job):
    response = client.get(url(job.id, job.version))
    assert response.status_code == 204
    assert response.content == b""
    assert response["Cache-Control"] == "no-store"


def test_changed_version_is_200_with_payload(client, job):
    jobstatus_progress(job_id=job.id, progress=40, message="half way")
    response = client.get(url(job.id, 1))
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert body["id"] == str(job.id)
    assert body["version"] == 2
    assert body["progress"] == 40
    assert body["message"] == "half way"
    assert body["finished"] is False
    # the new version is current now
    assert client.get(url(job.id, body["version"])).status_code == 204


def test_without_version_the_job_is_returned(client, job):
    assert client.get(url(job.id)).status_code == 200


@pytest.mark.parametrize("version", ["abc", "1.5", ""])
def test_non_integer_version_is_400_with_reason(client, job, version):
    response = client.get(url(job.id, version))
    assert response.status_code == 400
    assert response["Cache-Control"] == "no-store"
    assert response.json()["error"] == "version must be a whole number"


def test_unknown_job_is_404(client):
    response = client.get(url(uuid.uuid4(), 1))
    assert response.status_code == 404
    assert response.json() == {"error": "no such job"}
    assert response["Cache-Control"] == "no-store"


def test_only_get_is_allowed(client, job):
    assert client.post(url(job.id, 1)).status_code == 405


def test_only_the_starter_reads_a_job_of_a_kind_without_a_rule(job):
    assert Client().get(url(job.id)).status_code == 404  # anonymous
    stranger = Client()
    stranger.force_login(get_user_model().objects.create_user("stranger"))
    answer = stranger.get(url(job.id))
    assert answer.status_code == 404
    assert answer.json() == {"error": "no such job"}  # as if it did not exist
