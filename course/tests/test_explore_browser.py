"""The explorable lesson page in a real browser (Debian's Chromium, Playwright):
each control reruns the model and redraws the charts in place, with the keyboard,
on a phone, under axe; and without JavaScript the run form still runs."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Route

from config.processes import (
    ROOT,
    child_environment,
    free_port,
    start_daphne,
    start_manage,
    stop,
)
from course.labs.registry import lab_get
from course.textbook import model_key
from tests.browser import axe_violations, needs_axe, needs_chromium

SHOTS = ROOT / "screenshots"
QUEUES = "message-queues"

pytestmark = [pytest.mark.browser, pytest.mark.processes, needs_chromium]


@pytest.fixture
def site(transactional_db, redis_client) -> Iterator[str]:
    """A daphne and a lab worker on the test database; yields the base URL."""
    port = free_port()
    # As in production: the model runs in a worker process beside the daphne.
    server = start_daphne(
        port, {**child_environment(DEBUG="true"), "LIBRARY_LAB_EXPLORE_PROCESSES": "1"}
    )
    worker = start_manage("labworker", "--live-slots", "1", "--model-slots", "1")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(worker)
        stop(server)


@pytest.fixture
def no_records(monkeypatch) -> Iterator[None]:
    """Exploring records nothing: no run, no record, whatever the page did."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from course.models import LabRun
    from jobs.models import JobStatus

    yield
    assert JobStatus.objects.count() == 0
    assert LabRun.objects.count() == 0


def draws(page) -> int:
    return int(page.get_attribute("[data-explore]", "data-draws") or 0)


def redrawn(page, before: int) -> None:
    """Wait until the panel drew an answer after the ``before``-th."""
    page.wait_for_function(
        "n => Number(document.querySelector('[data-explore]').dataset.draws || 0) > n",
        arg=before,
        timeout=30_000,
    )


def charts(page) -> str:
    return page.inner_html("[data-explore-output] .lab-charts")


def explored(page, action) -> str:
    """Do ``action``, wait for the redraw, and return the charts drawn after it."""
    before, drawn = draws(page), charts(page)
    action()
    redrawn(page, before)
    after = charts(page)
    assert after != drawn, "the charts did not change"
    return after


def test_each_control_reruns_the_model_and_redraws_the_chart(site, browser, no_records):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    asked: list[str] = []
    page.on(
        "request", lambda r: asked.append(r.url) if "/model.json" in r.url else None
    )
    page.goto(f"{site}/course/{QUEUES}/?reveal=1")
    redrawn(page, 0)
    assert page.locator("[data-explore]").is_visible()
    assert "The model with the defaults" in page.inner_text("[data-explore-status]")
    assert page.locator("[data-explore-output] svg.lab-chart-svg").count() == 3

    # A slider, from the keyboard: Tab from the number field reaches it, an arrow
    # moves it one step, and the number field follows.
    page.focus("#id_production")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "id_production_slider"
    explored(page, lambda: page.keyboard.press("ArrowRight"))
    assert page.input_value("#id_production") == "6"
    status = page.inner_text("[data-explore-status]")
    assert "production=6" in status
    assert "moved since the previous values" in status
    moved = page.locator("[data-explore-output] td.is-moved")
    assert moved.count() > 0
    assert "was " in moved.first.locator(".sr-only").inner_text()
    assert page.locator("[data-explore-status]").get_attribute("role") == "status"

    # The number field moves the slider; typing is one request, not one a key.
    count = len(asked)
    explored(page, lambda: page.fill("#id_production", "10"))
    assert page.input_value("#id_production_slider") == "10"
    page.fill("#id_rounds", "")
    before = draws(page)
    page.locator("#id_rounds").press_sequentially("12", delay=20)
    redrawn(page, before)
    assert page.input_value("#id_rounds_slider") == "12"
    assert len(asked) == count + 2

    # A list: remove a chip, then add a value with Enter (which does not run the lab).
    explored(page, lambda: page.click("[aria-label='Remove 3 from consumers']"))
    assert page.input_value("#id_consumers") == "1,2"
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == (
        "Remove 2 from consumers"
    )
    page.fill("#id_consumers_add", "5")
    explored(page, lambda: page.press("#id_consumers_add", "Enter"))
    assert page.input_value("#id_consumers") == "1,2,5"
    assert "?job=" not in page.url
    assert page.locator("[data-field=consumers] .explore-chip").count() == 3

    # A select with the parameter's choices.
    explored(page, lambda: page.select_option("#id_arrivals_select", "poisson"))
    assert page.input_value("#id_arrivals") == "poisson"

    # A stepper for a small count.
    explored(page, lambda: page.click("[aria-label='Increase variability_consumers']"))
    assert page.input_value("#id_variability_consumers") == "2"

    # Reset to defaults puts every control back, and the model with it.
    explored(page, lambda: page.click("[data-reset]"))
    assert page.input_value("#id_production_slider") == "5"
    assert page.input_value("#id_arrivals_select") == "fixed"
    assert page.locator("[data-field=consumers] .explore-chip").count() == 3
    assert "The model with the defaults" in page.inner_text("[data-explore-status]")
    lab = lab_get(QUEUES)
    assert page.get_attribute("[data-explore]", "data-key") == model_key(
        lab, lab.defaults()
    )
    assert all("/model.json" in url for url in asked)
    assert errors == []


def test_only_the_latest_answer_is_drawn(site, browser, no_records):
    """A slow (unkept) answer still on its way is dropped for a newer change."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    aborted: list[str] = []
    page.on(
        "requestfailed",
        lambda r: aborted.append(r.url) if "/model.json" in r.url else None,
    )
    page.goto(f"{site}/course/{QUEUES}/?reveal=1")
    redrawn(page, 0)
    before = draws(page)
    seed = str(random.randrange(1_000_000, 2_000_000_000))  # a set nobody ran
    page.fill("#id_variability_jobs", "100000")
    page.select_option("#id_arrivals_select", "poisson")
    # The seed's answer is held on its way (a slow model, whatever this host's
    # speed) until the page has moved on to the next change.
    held: list[Route] = []

    def hold_the_seeds_answer(route: Route) -> None:
        if "production=7" in route.request.url:
            route.continue_()
        else:
            held.append(route)

    page.route(
        lambda url: "/model.json" in url and f"seed={seed}" in url,
        hold_the_seeds_answer,
    )
    with page.expect_request(lambda request: f"seed={seed}" in request.url):
        page.fill("#id_seed", seed)
    page.fill("#id_production", "7")  # while that answer is on its way
    redrawn(page, before)
    page.wait_for_timeout(300)
    assert aborted, "the stale request was not aborted"
    for route in held:
        with contextlib.suppress(PlaywrightError):  # the page gave up on it
            route.continue_()
    assert draws(page) == before + 1  # the aborted answer was never drawn
    lab = lab_get(QUEUES)
    latest = lab.resolve(
        {
            "variability_jobs": "100000",
            "arrivals": "poisson",
            "seed": seed,
            "production": "7",
        }
    )
    assert page.get_attribute("[data-explore]", "data-key") == model_key(lab, latest)


def test_a_refused_value_is_marked_where_run_would_mark_it(site, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{site}/course/cache-layers/?reveal=1")
    redrawn(page, 0)
    page.fill("#id_users", "0")
    page.wait_for_selector("[data-field=users].has-error")
    users = page.locator("#id_users")
    assert users.get_attribute("aria-invalid") == "true"
    assert "id_users_error" in (users.get_attribute("aria-describedby") or "")
    assert "at least 1" in page.inner_text("#id_users_error")
    assert page.evaluate("document.activeElement.id") == "id_users"  # not moved
    assert "previous values" in page.inner_text("[data-explore-status]")
    before = draws(page)
    page.fill("#id_users", "10")
    redrawn(page, before)
    assert users.get_attribute("aria-invalid") is None
    assert page.locator("[data-field=users].has-error").count() == 0

    # Costlier than a run without an account: said, with the way to an account.
    page.fill("#id_requests", "100000")
    page.wait_for_selector("[data-explore-status] a[href^='/accounts/signup/']")
    assert "without an account" in page.inner_text("[data-explore-status]")
    assert draws(page) == before + 1


def test_the_answer_stays_folded_until_the_learner_predicts(site, browser):
    slug = "hot-key-and-stampede-effect"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{site}/course/{slug}/")
    hold = page.locator("[data-explore-hold]")
    assert page.locator("[data-explore]").is_visible()
    assert hold.get_attribute("open") is None
    assert not page.locator("[data-explore-output]").is_visible()
    page.fill("#predict-first-value", "55")
    page.click("[data-predict-keep]")
    redrawn(page, 0)
    assert hold.get_attribute("open") is not None
    assert page.locator("[data-explore-output] svg.lab-chart-svg").first.is_visible()


@needs_axe
def test_the_controls_on_a_phone_and_under_axe(site, browser):
    SHOTS.mkdir(exist_ok=True)
    for name, width in (("desktop", 1280), ("phone", 390)):
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(f"{site}/course/{QUEUES}/?reveal=1")
        redrawn(page, 0)
        before = draws(page)
        page.select_option("#id_arrivals_select", "poisson")
        redrawn(page, before)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth"
            " - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"the page scrolls sideways at {width} px"
        if width == 390:
            # The controls stack, one field a row, each within the screen.
            boxes = [
                page.locator(f"[data-field={field}]").bounding_box()
                for field in ("visibility", "consumers", "arrivals", "seed")
            ]
            assert len({round(box["x"]) for box in boxes}) == 1
            assert all(box["x"] + box["width"] <= 390 for box in boxes)
            # A wide table scrolls in its own box, not the page.
            wide = page.locator(
                "[data-explore-output] .table-wrap[data-explore-table=variability]"
            )
            assert wide.evaluate("el => el.scrollWidth > el.clientWidth")
        assert axe_violations(page) == []
        page.locator("#explore").scroll_into_view_if_needed()
        page.screenshot(
            path=str(SHOTS / f"explore-{QUEUES}-{name}.png"), full_page=True
        )
        page.close()


def test_without_javascript_the_form_still_runs_the_lab(site, browser, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from jobs.models import JobStatus

    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{site}/course/cache-layers/")
    assert not page.locator("[data-explore]").is_visible()
    assert page.locator("input[type=range]").count() == 0
    page.fill("#id_requests", "700")
    page.click("[data-run]")
    page.wait_for_url("**/course/cache-layers/?job=*")
    # The page refreshes itself (a <noscript> refresh) until the run is done.
    page.wait_for_selector("[data-output] table.data", timeout=60_000, state="attached")
    assert "700" in page.inner_text("[data-output]")
    assert JobStatus.objects.get().params["requests"] == 700
    context.close()
