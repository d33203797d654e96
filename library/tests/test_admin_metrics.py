"""The admin's Cache metrics page: staff only, windows, totals, formula and reset."""

from __future__ import annotations

import time
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from config.redis_server import with_db
from library.admin_metrics import average_cost, metrics_report
from library.cache.metrics import (
    REDIS_TOTALS,
    metrics_read,
    metrics_record,
    metrics_reset,
)
from library.tests.cache_db import CACHE_TEST_DB

pytestmark = pytest.mark.django_db

# Database 15 is emptied by other test runs at any moment (see test_cache_metrics);
# these tests share the cache tests' database and touch only their own namespaces.

PAGE = "admin:cache_metrics"
RESET = "admin:cache_metrics_reset"


@pytest.fixture
def ns(settings):
    """Return a maker of namespaces unique to this test; forget them afterwards."""
    url = settings.REDIS_URL = with_db(settings.REDIS_URL, CACHE_TEST_DB)
    tag = uuid.uuid4().hex[:10]
    made: list[str] = []

    def make(name: str) -> str:
        made.append(f"{name}{tag}")
        return made[-1]

    yield make
    settings.REDIS_URL = url
    for namespace in made:
        metrics_reset(namespace)


def _row(response, namespace: str):
    return next(row for row in response.context["report"].rows if row.name == namespace)


def test_page_redirects_anonymous_users_and_members(client, member):
    url = reverse(PAGE)
    assert client.get(url).status_code == 302
    assert member.user is not None
    client.force_login(member.user)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_staff_see_counters_ratios_and_totals(staff_client, ns):
    books, search = ns("books"), ns("search")
    metrics_record(books, hits=3, misses=1, hit_bytes=300, miss_bytes=700)
    metrics_record(books, origin_calls=1, origin_ms_total=40, cache_ms_total=4)
    metrics_record(search, hits=1, misses=3, hit_bytes=100, miss_bytes=100)

    response = staff_client.get(reverse(PAGE))

    assert response.status_code == 200
    row = _row(response, books)
    assert (row.requests, row.metrics["hits"], row.metrics["misses"]) == (4, 3, 1)
    assert row.hit_percent == pytest.approx(75.0)
    assert row.byte_hit_percent == pytest.approx(30.0)
    assert (row.mean_origin_ms, row.mean_cache_ms) == (40.0, 1.0)
    total = response.context["report"].total
    # Other processes may have recorded namespaces of their own: at least ours.
    assert total.metrics["hits"] >= 4
    assert total.metrics["misses"] >= 4
    html = response.content.decode()
    assert books in html
    assert search in html
    assert "75.0 %" in html
    assert "30.0 %" in html
    assert 'class="total"' in html
    assert 'id="redis-evictions"' in html
    # The chart: the request bar at 75 %, the byte bar at 30 % of the plot's width.
    assert f'<g data-namespace="{books}">' in html
    assert 'width="75.0%"' in html
    assert 'width="30.0%"' in html


def test_window_selection_sums_only_the_buckets_inside_it(staff_client, ns):
    books = ns("books")
    now = time.time()
    metrics_record(books, now=now, hits=1)
    metrics_record(books, now=now - 30 * 60, hits=10)  # inside 1 h, not 5 min
    metrics_record(books, now=now - 5 * 3600, hits=100)  # inside 24 h
    metrics_record(books, now=now - 2 * 86400, hits=1000)  # inside 3 days

    hits = {
        window: _row(
            staff_client.get(reverse(PAGE), {"window": window}), books
        ).metrics["hits"]
        for window in ("5m", "1h", "24h", "3d")
    }

    assert hits == {"5m": 1, "1h": 11, "24h": 111, "3d": 1111}


def test_unknown_window_falls_back_to_one_hour(staff_client, ns):
    response = staff_client.get(reverse(PAGE), {"window": "forever"})
    assert response.status_code == 200
    assert response.context["window"] == "1h"


def test_average_cost_fills_in_the_course_formula():
    # T = t_c + (1 - h) t_o = 2 + 0.2 * 50 = 12 ms; no cache: 50 ms; saving 38 ms.
    cost = average_cost(hit_ratio=0.8, cache_ms=2.0, origin_ms=50.0)
    assert cost.expected_ms == pytest.approx(12.0)
    assert cost.saving_ms == pytest.approx(38.0)
    assert cost.saving_percent == pytest.approx(76.0)


def test_page_shows_the_formula_with_measured_numbers(staff_client, ns):
    books = ns("books")
    # h = 8/10, t_c = 20 ms / 10 lookups = 2 ms, t_o = 100 ms / 2 calls = 50 ms.
    metrics_record(books, hits=8, misses=2, cache_ms_total=20)
    metrics_record(books, origin_calls=2, origin_ms_total=100)

    response = staff_client.get(reverse(PAGE))

    cost = _row(response, books).cost
    assert cost.expected_ms == pytest.approx(12.0)
    html = response.content.decode()
    assert "2.00 + (1 \u2212 0.800) \u00d7 50.00" in html  # minus, times
    assert "12.00 ms" in html
    assert "38.00 ms (76.0 %)" in html


def test_namespace_without_origin_calls_has_no_estimate(ns):
    books = ns("books")
    metrics_record(books, hits=5)
    row = next(r for r in metrics_report(window_minutes=5).rows if r.name == books)
    assert row.cost is None


def test_empty_window_says_so(staff_client, ns, monkeypatch):
    # Other runs may record into this database at any moment: keep only the
    # server-wide entry of the real answer, so the page sees no namespace at all.
    def nothing_recorded(window_minutes, *, now=None):
        return {REDIS_TOTALS: metrics_read(window_minutes, now=now)[REDIS_TOTALS]}

    monkeypatch.setattr("library.admin_metrics.metrics_read", nothing_recorded)

    response = staff_client.get(reverse(PAGE), {"window": "5m"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "No cache traffic was recorded in the last 5 minutes" in html
    assert 'class="ratio-chart"' not in html
    assert 'id="redis-evictions"' in html


def test_redis_down_shows_a_note_not_an_error(staff_client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1

    response = staff_client.get(reverse(PAGE))

    assert response.status_code == 200
    assert "Redis did not answer" in response.content.decode()


def test_reset_needs_post(staff_client, ns):
    books = ns("books")
    metrics_record(books, hits=2)
    assert staff_client.get(reverse(RESET)).status_code == 405
    assert metrics_read(5)[books]["hits"] == 2


def test_reset_without_csrf_token_is_refused(staff_user, ns):
    books = ns("books")
    metrics_record(books, hits=2)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)

    response = client.post(reverse(RESET), {"namespace": books, "confirm": "on"})

    assert response.status_code == 403
    assert metrics_read(5)[books]["hits"] == 2


def test_reset_clears_the_chosen_namespace_only(staff_user, ns):
    books, search = ns("books"), ns("search")
    metrics_record(books, hits=2)
    metrics_record(search, hits=3)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)
    page = client.get(reverse(PAGE), {"window": "24h"})
    token = page.cookies["csrftoken"].value
    assert 'action="/admin/cache-metrics/reset/"' in page.content.decode()

    response = client.post(
        reverse(RESET),
        {
            "namespace": books,
            "window": "24h",
            "confirm": "on",
            "csrfmiddlewaretoken": token,
        },
    )

    assert response.status_code == 302
    assert response["Location"] == f"{reverse(PAGE)}?window=24h"
    report = metrics_read(5)
    assert books not in report
    assert report[search]["hits"] == 3
    after = client.get(response["Location"])
    assert f'data-namespace="{books}"' not in after.content.decode()
    assert f"Cache counters reset for namespace “{books}”." in after.content.decode()


def test_reset_needs_the_confirmation_box(staff_client, ns):
    books = ns("books")
    metrics_record(books, hits=2)

    response = staff_client.post(reverse(RESET), {"namespace": books})

    assert response.status_code == 400
    assert "Tick the box to confirm the reset." in response.content.decode()
    assert metrics_read(5)[books]["hits"] == 2


def test_reset_refuses_the_reserved_redis_entry(staff_client, ns):
    response = staff_client.post(
        reverse(RESET), {"namespace": "redis:global", "confirm": "on"}
    )
    assert response.status_code == 400


def test_reset_needs_the_permission(client, ns):
    books = ns("books")
    metrics_record(books, hits=2)
    user = get_user_model().objects.create_user(
        username="viewer", password="x", is_staff=True
    )
    client.force_login(user)

    page = client.get(reverse(PAGE))
    refused = client.post(reverse(RESET), {"namespace": books, "confirm": "on"})

    assert page.status_code == 200
    assert reverse(RESET) not in page.content.decode()
    assert refused.status_code == 403
    assert metrics_read(5)[books]["hits"] == 2

    user.user_permissions.add(Permission.objects.get(codename="change_book"))
    client.force_login(get_user_model().objects.get(pk=user.pk))  # fresh perm cache
    allowed = client.post(reverse(RESET), {"namespace": books, "confirm": "on"})
    assert allowed.status_code == 302
    assert books not in metrics_read(5)


def test_admin_index_links_to_the_page(staff_client):
    response = staff_client.get(reverse("admin:index"))
    html = response.content.decode()
    assert f'href="{reverse(PAGE)}"' in html
    assert 'id="messaging-overview"' in html  # the shared index keeps its panel
