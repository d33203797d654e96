"""The Operations history in a real browser: uPlot draws every chart that has data,
at desktop and phone width, against a real daphne."""

from __future__ import annotations

import time

import pytest

from config.processes import ROOT, free_port, start_daphne, stop
from jobs.series import series_add, series_flush, series_reset, series_sample
from jobs.telemetry import SHED
from library.cache.metrics import metrics_flush, metrics_record, metrics_reset
from tests.browser import needs_chromium

SHOTS = ROOT / "screenshots"
PASSWORD = "pw-operator-1"

pytestmark = [pytest.mark.browser, pytest.mark.processes, needs_chromium]


@pytest.fixture
def live_site(transactional_db, redis_client):
    port = free_port()
    server = start_daphne(port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(server)


def test_charts_are_drawn_at_desktop_and_phone_width(live_site, browser, monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM and Redis
    # calls below are plain blocking calls made between page steps.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("operator", password=PASSWORD)
    series_reset()
    metrics_reset()
    now = time.time()
    for minutes_ago in range(10):
        at = now - minutes_ago * 60
        metrics_record("books", now=at, hits=8 + minutes_ago, misses=2, origin_calls=2)
        series_add(SHED.name, "low/full", minutes_ago, now=at)
    metrics_flush()
    series_flush()
    series_sample()  # the real samplers: rq queues, the outbox, dead letters

    SHOTS.mkdir(exist_ok=True)
    errors: list[str] = []
    for width, height, name in ((1280, 900, "desktop"), (390, 844, "phone")):
        page = browser.new_page(viewport={"width": width, "height": height})
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{live_site}/admin/login/?next=/admin/operations-history/")
        page.fill("#id_username", "operator")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url("**/admin/operations-history/")

        page.wait_for_selector('.plot[data-drawn="true"] canvas', timeout=15_000)
        plots = page.locator(".plot")
        assert (
            plots.count() >= 5
        )  # the cache pair, lag, throughput, depth, latency, shed
        for index in range(plots.count()):
            plot = plots.nth(index)
            assert plot.get_attribute("data-drawn") == "true"
            assert plot.locator("canvas").count() == 1
            box = plot.locator("canvas").bounding_box()
            assert box is not None
            # Fits the screen: no chart is wider than the viewport.
            assert 0 < box["width"] <= width
        legend = page.locator("#chart-cache-hit-ratio .latest").inner_text()
        assert "books" in legend
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - window.innerWidth"
        )
        assert overflow <= 0, f"the page scrolls sideways at {width}px"
        page.screenshot(path=str(SHOTS / f"operations-{name}.png"), full_page=True)
        page.close()
    assert errors == []
