"""The django-rq dashboard is one click from the admin index, for staff only."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


def signed_in(*, staff: bool) -> Client:
    user = get_user_model().objects.create_user(
        "staffer" if staff else "reader", is_staff=staff, is_superuser=staff
    )
    client = Client()
    client.force_login(user)
    return client


def test_staff_reach_the_queues_dashboard_from_the_index(redis_client) -> None:
    client = signed_in(staff=True)
    index = client.get("/admin/").content.decode()
    assert 'href="/admin/rq/"' in index
    dashboard = client.get("/admin/rq/")
    assert dashboard.status_code == 200
    for queue in ("default", "messaging"):
        assert queue in dashboard.content.decode()


@pytest.mark.parametrize("staff", [None, False])
def test_others_are_sent_to_sign_in(staff, redis_client) -> None:
    client = Client() if staff is None else signed_in(staff=False)
    answer = client.get("/admin/rq/")
    assert answer.status_code == 302
    assert "/admin/login/" in answer["Location"]
