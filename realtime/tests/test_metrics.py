"""/realtime/metrics: staff only, and a clear 503 while Redis does not answer."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from config.processes import free_port
from realtime.views import METRICS_RETRY_AFTER_S

pytestmark = [pytest.mark.django_db]
URL = "/realtime/metrics"


@pytest.fixture
def staff_client(client: Client, django_user_model) -> Client:
    client.force_login(django_user_model.objects.create_user("desk", is_staff=True))
    return client


def test_anonymous_user_is_sent_to_sign_in_and_sees_no_pid(client, settings):
    settings.LAB_ROUTES = False
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('account_login')}?next={URL}"
    assert b"pid" not in response.content


def test_signed_in_reader_is_refused_with_403(client, django_user_model, settings):
    settings.LAB_ROUTES = False
    client.force_login(django_user_model.objects.create_user("reader"))
    response = client.get(URL)
    assert response.status_code == 403
    assert response.json() == {"error": "staff only"}


def test_staff_reads_counters_and_the_process(staff_client, settings, redis_client):
    settings.LAB_ROUTES = False
    response = staff_client.get(URL)
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert body["counters"]["short_requests"] == 0
    assert isinstance(body["process"]["pid"], int)


def test_redis_down_is_a_503_with_retry_after(staff_client, settings):
    settings.LAB_ROUTES = False
    # A port nothing listens on: every connection is refused at once.
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = staff_client.get(URL)
    assert response.status_code == 503
    assert response["Retry-After"] == str(METRICS_RETRY_AFTER_S)
    assert response["Cache-Control"] == "no-store"
    assert response.json() == {
        "error": "Redis is unavailable; the counters cannot be read"
    }


def test_lab_servers_answer_signed_out(client, settings, redis_client):
    settings.LAB_ROUTES = True  # only the daphnes of labs, tests and benchmarks
    response = client.get(URL)
    assert response.status_code == 200
    assert "open_streams" in response.json()["process"]
