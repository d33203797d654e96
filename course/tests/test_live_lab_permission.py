"""A live lab run needs ``course.run_live_lab``: being staff is not enough."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import JobStatus
from library.permissions import RUN_LIVE_LAB, permission_get

pytestmark = pytest.mark.django_db

RUN = "/course/dead-letter-queues/run"
LIVE = {"live": "on", "messages": "10", "permanent": "4"}


def staff_client(*, may_run_live: bool) -> Client:
    user = User.objects.create_user("lab-staff", password="x", is_staff=True)
    if may_run_live:
        user.user_permissions.add(permission_get(RUN_LIVE_LAB))
    client = Client()
    client.force_login(user)
    return client


def test_staff_without_the_permission_are_refused_a_live_run(redis_client):
    client = staff_client(may_run_live=False)
    response = client.post(RUN, LIVE, headers={"accept": "application/json"})
    assert response.status_code == 403
    assert "live" in response.json()["errors"]
    assert client.post(RUN, LIVE).status_code == 403
    assert not JobStatus.objects.exists()


def test_staff_with_the_permission_queue_a_live_run(redis_client):
    client = staff_client(may_run_live=True)
    response = client.post(RUN, LIVE, headers={"accept": "application/json"})
    assert response.status_code == 202
    assert JobStatus.objects.get().params["_live"] is True
