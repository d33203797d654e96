"""The site in a real browser, audited (issue #25): axe-core on the main pages, the
focus ring, the sticky header, the phone menu, layout shift, figures in their boxes.

axe-core comes from the npm registry (tests/js, installed by `make test`); a
"serious" or "critical" violation on any audited page fails the test, listed.
"""

from __future__ import annotations

import datetime
import json
import time

import pytest

from config.processes import free_port, start_daphne, start_manage, stop
from tests.browser import LAYOUT_SHIFT, axe_violations, needs_axe, needs_chromium

pytestmark = [pytest.mark.browser, pytest.mark.processes, needs_chromium]
PASSWORD = "pw-operator-a11y-1"
WIDTHS = ((1280, 900), (390, 844))


@pytest.fixture
def site(transactional_db, redis_client):
    """A small library, an operator, scheduled tasks and a few minutes of history,
    served by daphne with a lab worker; yields (base URL, first branch id)."""
    from django.contrib.auth import get_user_model

    from jobs.models import ScheduledTaskState
    from jobs.scheduler import TASKS_BY_NAME
    from jobs.series import series_add, series_flush, series_reset, series_sample
    from jobs.telemetry import SHED
    from library.cache.metrics import metrics_flush, metrics_record, metrics_reset
    from library.models import Book, Branch, Member

    branches = [
        Branch.objects.create(name="Central", city="Ankara"),
        Branch.objects.create(name="Harbour", city="Izmir"),
    ]
    for branch in branches:
        for n in range(24):
            Book.objects.create(
                title=f"A rather long title of a book, volume {n} of {branch.name}",
                author="Anon",
                branch=branch,
                on_shelf=n % 4,
            )
    Member.objects.create(
        first_name="Ada", last_name="Lovelace", registered_at=datetime.date(2024, 1, 1)
    )
    get_user_model().objects.create_superuser("operator", password=PASSWORD)
    for name in TASKS_BY_NAME:
        ScheduledTaskState.objects.create(
            name=name,
            next_run_at=datetime.datetime(2026, 3, 1, 2, tzinfo=datetime.UTC),
            last_run_at=datetime.datetime(2026, 2, 1, 2, tzinfo=datetime.UTC),
            last_outcome="ran",
            runs_total=1234,
            skipped_total=3,
            missed_total=2,
        )
    series_reset()
    metrics_reset()
    now = time.time()
    for minutes_ago in range(10):
        at = now - minutes_ago * 60
        metrics_record("books", now=at, hits=8 + minutes_ago, misses=2, origin_calls=2)
        series_add(SHED.name, "low/full", minutes_ago, now=at)
    metrics_flush()
    series_flush()
    series_sample()

    port = free_port()
    server = start_daphne(port)
    worker = start_manage("labworker", "--live-slots", "1", "--model-slots", "1")
    try:
        yield f"http://127.0.0.1:{port}", branches[0].pk
    finally:
        stop(worker)
        stop(server)


def signed_in(browser, base: str, width: int, height: int):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    return context, page


@needs_axe
def test_no_serious_or_critical_axe_violation_on_the_main_pages(
    site, browser, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    base, branch = site
    found: dict[str, list[dict[str, object]]] = {}

    def audit(page, name: str) -> None:
        violations = axe_violations(page)
        if violations:
            found[name] = violations

    for width, height in WIDTHS:
        # Signed out first: the home page and the course as a visitor sees them.
        visitor = browser.new_page(viewport={"width": width, "height": height})
        visitor.goto(f"{base}/")
        audit(visitor, f"home (visitor) @{width}")
        visitor.close()

        context, page = signed_in(browser, base, width, height)
        pages = [
            ("home", "/"),
            ("course index", "/course/"),
            ("lesson", "/course/cache-layers/"),
            ("branch", f"/branches/{branch}/"),
            ("live shelf", f"/branches/{branch}/live/"),
            ("loan desk", "/loans/issue/"),
            ("admin index", "/admin/"),
            ("scheduled tasks", "/admin/jobs/scheduledtaskstate/"),
            ("operations history", "/admin/operations-history/"),
        ]
        for name, path in pages:
            page.goto(f"{base}{path}")
            page.wait_for_load_state("networkidle")
            if name == "live shelf":
                page.wait_for_function("window.liveShelf.state.version >= 0")
            audit(page, f"{name} @{width}")
            if name == "lesson":
                page.click("[data-run]")
                page.wait_for_selector(
                    'table.data[data-table="repetition"]', timeout=30_000
                )
                page.wait_for_selector("[data-interpretation]", timeout=10_000)
                audit(page, f"lesson after a run @{width}")
        context.close()
    assert found == {}, json.dumps(found, indent=1)


def test_the_focus_ring_is_an_outline_that_stands_out_also_in_forced_colours(
    site, browser
):
    base, _ = site
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/course/")

    def tab_to(selector: str) -> dict[str, str]:
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate("(s) => document.activeElement.matches(s)", selector):
                return page.evaluate(
                    """() => {
                      const s = getComputedStyle(document.activeElement);
                      return { style: s.outlineStyle, width: s.outlineWidth,
                               colour: s.outlineColor };
                    }"""
                )
        raise AssertionError(f"Tab never reached {selector}")

    def contrast(colour: str, against: str) -> float:
        return page.evaluate(
            """([a, b]) => {
              const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
              const lum = (c) => {
                const [r, g, b] = rgb(c).map((v) => {
                  v /= 255;
                  return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
                });
                return 0.2126 * r + 0.7152 * g + 0.0722 * b;
              };
              const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
              return (x + 0.05) / (y + 0.05);
            }""",
            [colour, against],
        )

    page_background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    header_background = page.evaluate(
        "getComputedStyle(document.querySelector('.site-header')).backgroundColor"
    )
    # A link in the header (dark) and one in the page (light).
    in_header = tab_to(".site-header a[href='/course/']")
    assert in_header["style"] == "solid"
    assert float(in_header["width"][:-2]) >= 2
    assert contrast(in_header["colour"], header_background) >= 3
    in_page = tab_to("main a.lesson-link")
    assert in_page["style"] == "solid"
    assert float(in_page["width"][:-2]) >= 2
    assert contrast(in_page["colour"], page_background) >= 3

    # Forced colours (Windows high contrast): shadows are dropped, outlines stay.
    page.emulate_media(forced_colors="active")
    page.goto(f"{base}/course/")
    in_page = tab_to("main a.lesson-link")
    assert in_page["style"] == "solid"
    assert float(in_page["width"][:-2]) >= 2


def test_the_sticky_header_covers_neither_an_anchor_target_nor_the_focus(site, browser):
    base, _ = site
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/course/cache-layers/")
    header = page.locator(".site-header").bounding_box()
    assert header is not None
    bottom = header["y"] + header["height"]

    # Every table-of-contents jump lands below the header.
    links = page.locator(".lesson-toc a")
    for index in range(links.count()):
        target = links.nth(index).get_attribute("href")
        links.nth(index).click()
        page.wait_for_timeout(100)
        top = page.evaluate(
            "(id) => document.getElementById(id).getBoundingClientRect().top",
            target[1:],
        )
        assert top >= bottom, f"{target} ends up under the header"
        # The table of contents itself stays below the header too.
        toc = page.locator(".lesson-toc nav").bounding_box()
        assert toc is not None
        assert toc["y"] >= bottom - 1

    # Focus moved back up the page by the keyboard: the element shows below it.
    page.keyboard.press("End")
    page.wait_for_timeout(100)
    page.evaluate("document.querySelectorAll('.header-anchor')[1].focus()")
    top = page.evaluate("document.activeElement.getBoundingClientRect().top")
    assert top >= bottom


def test_escape_closes_the_phone_menu(site, browser):
    base, _ = site
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{base}/")
    toggle = page.locator(".nav-toggle")
    toggle.focus()
    page.keyboard.press("Enter")
    assert toggle.get_attribute("aria-expanded") == "true"
    assert page.locator("#nav-links").is_visible()
    page.keyboard.press("Tab")  # into the menu
    page.keyboard.press("Escape")
    assert toggle.get_attribute("aria-expanded") == "false"
    assert not page.locator("#nav-links").is_visible()
    assert page.evaluate("document.activeElement.matches('.nav-toggle')")


def _slowly(route) -> None:
    """Hold a script back, as a slow network would: the page paints before it runs."""
    time.sleep(0.6)
    route.continue_()


def test_the_live_shelf_and_the_operations_charts_do_not_shift(site, browser):
    base, branch = site
    for width, height in WIDTHS:
        context, page = signed_in(browser, base, width, height)
        page.route("**/js/live.js", _slowly)
        page.goto(f"{base}/branches/{branch}/live/")
        page.wait_for_function(
            "window.liveShelf && window.liveShelf.state.version >= 0"
        )
        page.wait_for_timeout(300)
        shift = page.evaluate(LAYOUT_SHIFT)
        assert shift <= 0.1, f"the live shelf shifts by {shift:.3f} at {width} px"
        rows = page.locator("[data-live-rows] tr[data-book]").count()
        assert rows == 24

        page.route("**/uPlot.iife.min.js", _slowly)
        page.goto(f"{base}/admin/operations-history/")
        page.wait_for_selector('.plot[data-drawn="true"] canvas')
        page.wait_for_timeout(300)
        shift = page.evaluate(LAYOUT_SHIFT)
        assert shift <= 0.1, f"the charts shift by {shift:.3f} at {width} px"
        legend = page.locator("#chart-cache-hit-ratio .latest").inner_text()
        assert "books" in legend
        context.close()


def test_the_course_figures_fit_their_boxes(site, browser):
    base, _ = site
    for width, height in WIDTHS:
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(f"{base}/course/")
        overflowing = page.evaluate(
            """[...document.querySelectorAll('.hero .stat')].filter((box) => {
                 const figure = box.querySelector('dd');
                 const outer = box.getBoundingClientRect();
                 const inner = figure.getBoundingClientRect();
                 return figure.scrollWidth > figure.clientWidth
                   || inner.right > outer.right || inner.left < outer.left;
               }).map((box) => box.textContent.trim())"""
        )
        assert overflowing == [], f"at {width} px"
        page.close()
