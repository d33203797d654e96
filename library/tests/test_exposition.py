"""/metrics: who may read it, what it holds, and a 503 while Redis does not answer."""

from __future__ import annotations

import time
import uuid

import django_rq
import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from rq import Queue

from config.processes import free_port
from jobs.series import series_add, series_flush, series_reset, series_sample
from jobs.telemetry import SHED
from library.cache.metrics import metrics_record, metrics_reset
from library.exposition import METRICS_RETRY_AFTER_S
from library.permissions import VIEW_OPERATIONS, permission_get
from messaging.tests.conftest import library_rows  # noqa: F401  (a fixture)
from messaging.tests.test_selectors import break_subscribers, issue_and_drain

pytestmark = pytest.mark.django_db

URL = "/metrics"
TOKEN = "t" * 40


@pytest.fixture
def clean(redis_client, settings):
    settings.METRICS_TOKEN = TOKEN
    series_reset()
    metrics_reset()
    yield
    series_reset()
    metrics_reset()


def _staff(*, allowed: bool) -> Client:
    user = get_user_model().objects.create_user(
        f"staff-{uuid.uuid4().hex[:6]}", is_staff=True
    )
    if allowed:
        user.user_permissions.add(permission_get(VIEW_OPERATIONS))
    client = Client()
    client.force_login(user)
    return client


def _families(response) -> dict[str, Metric]:
    families = text_string_to_metric_families(response.content.decode())
    return {family.name: family for family in families}


def _value(family, **labels) -> float:
    return next(
        sample.value
        for sample in family.samples
        if all(sample.labels.get(k) == v for k, v in labels.items())
        and not sample.name.endswith("_created")
    )


def test_the_token_opens_it(client, clean):
    response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.parametrize("token", ["wrong", TOKEN[:-1], ""])
def test_a_wrong_token_is_a_401_naming_the_scheme(client, clean, token):
    response = client.get(URL, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith('Bearer realm="metrics"')


def test_no_token_configured_refuses_every_bearer(client, clean, settings):
    settings.METRICS_TOKEN = ""
    response = client.get(URL, headers={"Authorization": "Bearer "})
    assert response.status_code == 401


def test_anonymous_and_plain_staff_get_403(client, clean):
    assert client.get(URL).status_code == 403
    assert _staff(allowed=False).get(URL).status_code == 403


def test_staff_with_the_permission_read_it(clean):
    assert _staff(allowed=True).get(URL).status_code == 200


def test_writes_are_refused(client, clean):
    response = client.post(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 405


def test_the_exposition_parses_and_carries_every_source(
    client,
    clean,
    settings,
    library_rows,  # noqa: F811
    monkeypatch,
):
    break_subscribers(monkeypatch)
    issue_and_drain(1, 2)
    metrics_record("books", hits=3, misses=1, hit_bytes=30, origin_calls=1)
    series_add(SHED.name, "low/full", 2, now=time.time())
    series_add(SHED.name, "critical/deadline", 1, now=time.time())
    series_flush()
    name = f"metrics-test-{uuid.uuid4().hex[:8]}"
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, name: settings.RQ_QUEUES["default"]}
    queue = Queue(name, connection=django_rq.get_connection(name))
    queue.enqueue("os.getcwd")
    queue.enqueue("os.getcwd")
    series_sample()  # the minute's recount of deliveries done

    response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})

    families = _families(response)
    assert _value(families["library_cache_hits_last_5m"], namespace="books") == 3
    assert _value(families["library_cache_misses_last_5m"], namespace="books") == 1
    assert (
        _value(families["library_cache_origin_calls_last_5m"], namespace="books") == 1
    )
    assert (
        _value(families["library_cache_hit_ratio_last_5m"], namespace="books") == 0.75
    )
    assert families["library_cache_hits_last_5m"].type == "gauge"
    assert families["library_redis_evicted_keys"].type == "counter"
    assert _value(families["library_outbox_unrelayed_messages"]) == 0
    assert "library_outbox_oldest_due_age_seconds" in families
    deliveries = families["library_deliveries"]
    assert _value(deliveries, subscription="notification", status="dead") == 2
    assert _value(deliveries, subscription="stock_summary", status="pending") == 0
    done = families["library_deliveries_done_last_5m"]
    assert _value(done, subscription="stock_summary") == 2
    assert _value(done, subscription="notification") == 0
    letters = families["library_dead_letters_open"]
    assert _value(letters, subscription="notification") == 2
    assert _value(letters, subscription="stock_summary") == 0
    assert _value(families["library_rq_queue_depth"], queue=name) == 2
    assert _value(families["library_rq_oldest_job_age_seconds"], queue=name) >= 0
    shed = families["library_http_shed"]
    assert shed.type == "counter"
    assert _value(shed, **{"class": "low", "reason": "full"}) == 2
    assert _value(shed, **{"class": "critical", "reason": "deadline"}) == 1
    # Every family of ours is prefixed; the default registry's process metrics and
    # django-rq's collector are not on this page.
    assert all(family.startswith("library_") for family in families)


def test_counters_only_grow_between_scrapes(client, clean):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    series_add(SHED.name, "low/full", 2, now=time.time())
    first = _value(_families(client.get(URL, headers=auth))["library_http_shed"])
    series_add(SHED.name, "low/full", 1, now=time.time())
    second = _value(_families(client.get(URL, headers=auth))["library_http_shed"])
    assert (first, second) == (2, 3)


def test_redis_down_is_a_503_with_retry_after(client, clean):
    # A port nothing listens on: every connection is refused at once. Restored
    # before the fixture's own clean-up, which needs the real Redis.
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
        response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})

    assert response.status_code == 503
    assert response["Retry-After"] == str(METRICS_RETRY_AFTER_S)
