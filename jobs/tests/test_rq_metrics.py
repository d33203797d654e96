"""django-rq's own Prometheus view: on (prometheus-client is installed) and guarded by
the dashboard permission on both of its mounts, like every other dashboard route."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from library.permissions import RQ_DASHBOARD, permission_get

pytestmark = pytest.mark.django_db

MOUNTS = ["/admin/rq/metrics/", "/admin/django_rq/dashboard/metrics/"]


def _staff(*, operator: bool) -> Client:
    user = get_user_model().objects.create_user(
        "operator" if operator else "clerk", is_staff=True
    )
    if operator:
        user.user_permissions.add(permission_get(RQ_DASHBOARD))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("mount", MOUNTS)
def test_operators_read_rq_metrics(redis_client, mount):
    response = _staff(operator=True).get(mount)

    assert response.status_code == 200
    names = {f.name for f in text_string_to_metric_families(response.content.decode())}
    assert {"rq_jobs", "rq_workers"} <= names


@pytest.mark.parametrize("mount", MOUNTS)
def test_staff_without_the_permission_get_403(redis_client, mount):
    assert _staff(operator=False).get(mount).status_code == 403


@pytest.mark.parametrize("mount", MOUNTS)
def test_anonymous_users_are_refused(client, mount):
    assert client.get(mount).status_code == 401  # django-rq's own answer
