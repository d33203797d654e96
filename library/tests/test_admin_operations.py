"""The admin's Operations history: its permission, windows, data and empty states."""

from __future__ import annotations

import datetime
import json
import re
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from config.processes import free_port
from jobs.series import series_add, series_reset, series_sample
from jobs.telemetry import SHED
from library.admin_operations import WINDOWS, operations_charts
from library.cache.metrics import metrics_record, metrics_reset
from library.permissions import VIEW_OPERATIONS, permission_get
from messaging.models import DeadLetter, Delivery, OutboxMessage

pytestmark = pytest.mark.django_db

PAGE = "admin:operations_history"


@pytest.fixture
def clean(redis_client):
    series_reset()
    metrics_reset()
    yield
    series_reset()
    metrics_reset()


def _client(*, allowed: bool) -> Client:
    user = get_user_model().objects.create_user(
        "operator" if allowed else "clerk", is_staff=True
    )
    if allowed:
        user.user_permissions.add(permission_get(VIEW_OPERATIONS))
    client = Client()
    client.force_login(user)
    return client


def _payload(response) -> dict[str, Any]:
    found = re.search(
        r'<script id="operations-data" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert found, "the page carries its data as json_script"
    return json.loads(found.group(1))


def _chart(payload: dict[str, Any], chart_id: str) -> dict[str, Any]:
    return next(chart for chart in payload["charts"] if chart["id"] == chart_id)


def test_anonymous_users_are_sent_to_sign_in(client):
    response = client.get(reverse(PAGE))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_staff_without_the_permission_get_403(clean):
    assert _client(allowed=False).get(reverse(PAGE)).status_code == 403


def test_the_page_carries_every_series_as_json(clean):
    now = time.time()
    metrics_record("books", now=now, hits=3, misses=1, origin_calls=1)
    series_add(SHED.name, "low/full", 4, now=now)

    response = _client(allowed=True).get(reverse(PAGE))

    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0")
    payload = _payload(response)
    assert payload["window"] == "1h"
    ids = [chart["id"] for chart in payload["charts"]]
    assert ids[:2] == ["cache-hit-ratio", "cache-origin-calls"]
    for expected in (
        "outbox-lag",
        "deliveries-done",
        "deadletters-new",
        "rq-depth",
        "rq-oldest_age",
        "http-shed",
    ):
        assert expected in ids
    ratio = _chart(payload, "cache-hit-ratio")
    assert len(ratio["x"]) == 60  # one point a minute over the hour
    (line,) = ratio["lines"]
    assert line["label"] == "books"
    assert line["latest"] == 75.0
    # One minute with lookups; the others are gaps, not 0 %.
    assert [value for value in line["values"] if value is not None] == [75.0]
    shed = _chart(payload, "http-shed")
    assert shed["unit"] == "requests per minute"
    assert shed["lines"][0]["label"] == "low/full"
    assert max(shed["lines"][0]["values"]) == 4.0
    html = response.content.decode()
    assert "Kept for 3 days" in html
    assert 'src="/static/vendor/uplot/uPlot.iife.min.js"' in html
    # No inline script: the only <script> without src is the JSON data island.
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == [
        '<script id="operations-data" type="application/json">'
    ]


def test_longer_windows_have_coarser_points(clean):
    series_add(SHED.name, "normal/deadline", 30, now=time.time())

    payload = _payload(_client(allowed=True).get(reverse(PAGE), {"window": "3d"}))

    shed = _chart(payload, "http-shed")
    assert shed["step_minutes"] == 30
    assert 144 <= len(shed["x"]) <= 145
    # 30 sheds in one 30-minute point: one a minute on average.
    assert max(shed["lines"][0]["values"]) == 1.0
    letters = _chart(payload, "deadletters-new")
    assert letters["step_minutes"] == 60
    assert letters["unit"] == "letters per hour"


def test_empty_windows_say_so_and_unknown_windows_fall_back(clean):
    response = _client(allowed=True).get(reverse(PAGE), {"window": "forever"})

    assert response.status_code == 200
    assert response.context["window"] == "1h"
    html = response.content.decode()
    assert "No cache lookups were recorded in the last 1 hour" in html
    assert "No samples in the last 1 hour yet" in html
    assert 'class="plot"' not in html


def test_redis_down_shows_a_note_not_an_error(clean, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"

    response = _client(allowed=True).get(reverse(PAGE))

    assert response.status_code == 200
    assert "Redis did not answer" in response.content.decode()


def test_the_cache_metrics_page_links_here_for_those_who_may_look(clean):
    url = reverse("admin:cache_metrics")
    assert reverse(PAGE) in _client(allowed=True).get(url).content.decode()
    assert reverse(PAGE) not in _client(allowed=False).get(url).content.decode()


def _dead_letter_at(when: datetime.datetime) -> None:
    message = OutboxMessage.objects.create(type="loan_issued", key="1", body={})
    delivery = Delivery.objects.create(
        message=message,
        subscription="notification",
        status=Delivery.Status.DEAD,
        available_at=when,
    )
    DeadLetter.objects.create(
        delivery=delivery,
        subscription="notification",
        message_type="loan_issued",
        body={},
        attempts=5,
        last_error="LookupError: member 1 not found",
        first_failed_at=when,
        last_failed_at=when,
    )


def test_counts_are_steps_over_their_own_bucket(clean):
    # The hour before the current one, so every moment below has passed.
    hour = (int(time.time()) // 3600 - 1) * 3600
    died = datetime.datetime.fromtimestamp(hour + 8 * 60, tz=datetime.UTC)  # 09:08
    # The scheduler samples every minute; twice is enough here: once in the hour
    # before (its minutes counted 0 letters), once just after the deaths.
    series_sample(now=died - datetime.timedelta(minutes=55))
    for _ in range(3):
        _dead_letter_at(died)
    series_sample(now=died + datetime.timedelta(minutes=1))

    charts = operations_charts(WINDOWS["1h"], now=hour + 30 * 60)  # read at 09:30

    letters = next(c for c in charts if c["id"] == "deadletters-new")
    assert letters["draw"] == "steps"
    assert letters["step_minutes"] == 60
    # Two buckets, 08:00 and 09:00; the last ends at 10:00.
    assert letters["x"] == [hour - 3600, hour]
    assert letters["x_end"] == hour + 3600
    values = next(line for line in letters["lines"] if line["label"] == "notification")
    # All three in the bucket that holds 09:08, drawn flat from 09:00 to 10:00; the
    # hour before holds none, so nothing slopes up through it.
    assert values["values"] == [0.0, 3.0]
    # Levels are samples: lines, their buckets' ends given all the same.
    open_letters = next(c for c in charts if c["id"] == "deadletters-open")
    assert open_letters["draw"] == "line"
    assert open_letters["x_end"] == open_letters["x"][-1] + 60
    assert {c["draw"] for c in charts if c["kind"] in ("count", "tally", "cache")} == {
        "steps"
    }
