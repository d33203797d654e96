"""The queues dashboard needs django-rq's permission, on both of its mounts.

django-rq checks only ``is_staff``; a staff member without ``django_rq.admin`` must
get a 403 and leave the queue and the failed registry as they were.
"""

from __future__ import annotations

import uuid

import django_rq
import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django_rq.settings import get_queues_map
from rq import Queue
from rq.job import JobStatus
from rq.registry import FailedJobRegistry

from library.permissions import RQ_DASHBOARD, permission_get

pytestmark = pytest.mark.django_db

MOUNTS = ["/admin/rq/", "/admin/django_rq/dashboard/"]


@pytest.fixture
def queue(redis_client, settings) -> Queue:
    # A queue of this test alone (the dashboard lists RQ_QUEUES as they are now), so
    # no worker of another test takes its job. rq's own Queue class: django-rq's
    # would hold the enqueue until the test's transaction commits.
    name = f"perm-test-{uuid.uuid4().hex[:8]}"
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, name: settings.RQ_QUEUES["default"]}
    queue = Queue(name, connection=django_rq.get_connection(name))
    queue.enqueue("os.getcwd")
    # A job that failed has left the queue and sits in the failed registry only.
    failed = queue.create_job("os.getcwd")
    failed.set_status(JobStatus.FAILED, pipeline=None)
    failed.save()
    FailedJobRegistry(queue=queue).add(failed, ttl=600, exc_string="boom")
    return queue


def staff_client(*, operator: bool) -> Client:
    user = get_user_model().objects.create_user(
        "operator" if operator else "clerk", is_staff=True
    )
    if operator:
        user.user_permissions.add(permission_get(RQ_DASHBOARD))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("mount", MOUNTS)
def test_staff_without_the_permission_get_403_everywhere(queue, mount):
    index = get_queues_map()[queue.name]
    client = staff_client(operator=False)
    assert client.get(mount).status_code == 403
    assert client.get(f"{mount}queues/{index}/").status_code == 403
    assert client.post(f"{mount}queues/{index}/empty/").status_code == 403
    assert client.post(f"{mount}queues/{index}/failed/clear/").status_code == 403
    assert client.post(f"{mount}queues/{index}/requeue-all/").status_code == 403
    assert client.get(f"{mount}stats.json").status_code == 403
    assert queue.count == 1
    assert len(FailedJobRegistry(queue=queue)) == 1


@pytest.mark.parametrize("mount", MOUNTS)
def test_staff_with_the_permission_empty_the_queue_and_clear_failures(queue, mount):
    index = get_queues_map()[queue.name]
    client = staff_client(operator=True)
    assert client.get(mount).status_code == 200
    assert client.post(f"{mount}queues/{index}/empty/").status_code == 302
    assert queue.count == 0
    assert client.post(f"{mount}queues/{index}/failed/clear/").status_code == 302
    assert len(FailedJobRegistry(queue=queue)) == 0


def test_the_admin_index_links_the_dashboard_only_for_its_operators(redis_client):
    assert (
        'href="/admin/rq/"'
        not in staff_client(operator=False).get("/admin/").content.decode()
    )
    assert (
        'href="/admin/rq/"'
        in staff_client(operator=True).get("/admin/").content.decode()
    )


@override_settings(RQ_API_TOKEN="s3cret-token")
def test_the_api_token_still_reads_the_stats_without_a_user(redis_client):
    client = staff_client(operator=False)
    bearer = {"Authorization": "Bearer s3cret-token"}
    assert client.get("/admin/rq/stats.json", headers=bearer).status_code == 200
    wrong = {"Authorization": "Bearer guessed"}
    assert client.get("/admin/rq/stats.json", headers=wrong).status_code == 403
    assert Client().get("/admin/rq/stats.json", headers=bearer).status_code == 200


@pytest.mark.parametrize("mount", MOUNTS)
def test_a_job_rq_does_not_hold_is_a_404_not_a_500(queue, mount):
    index = get_queues_map()[queue.name]
    client = staff_client(operator=True)
    client.raise_request_exception = False
    gone = uuid.uuid4()
    assert client.get(f"{mount}queues/{index}/{gone}/").status_code == 404
    assert client.post(f"{mount}queues/{index}/{gone}/requeue/").status_code == 404
    held = queue.job_ids[0]
    assert client.get(f"{mount}queues/{index}/{held}/").status_code == 200
