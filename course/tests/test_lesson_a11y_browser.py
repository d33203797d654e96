"""A lesson page with the keyboard and a screen reader's needs in mind (issue #25).

Real daphne and lab worker (the ``live_site`` of test_browser.py), real Chromium.
"""

from __future__ import annotations

import pytest

from course.tests.test_browser import live_site  # noqa: F401 (a fixture)
from course.textbook import lesson_text
from tests.browser import needs_chromium

pytestmark = [pytest.mark.browser, pytest.mark.processes, needs_chromium]


def active_matches(page, selector: str) -> bool:
    return page.evaluate("(s) => document.activeElement.matches(s)", selector)


def test_run_keeps_the_focus_and_a_rejected_value_is_announced(live_site, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_site}/course/cache-layers/")

    # Run from the keyboard: the button disables itself, focus moves to the
    # progress line, then to the result when it arrives.
    page.focus("[data-run]")
    page.keyboard.press("Enter")
    page.wait_for_function("document.activeElement.matches('[data-message]')")
    page.wait_for_selector('table.data[data-table="repetition"]', timeout=30_000)
    page.wait_for_function(
        "document.activeElement.closest('[data-output]') !== null", timeout=5_000
    )
    assert not active_matches(page, "body")

    # A value the experiment refuses: marked invalid, its reason linked to it.
    page.fill("#id_users", "0")
    page.focus("[data-run]")
    page.keyboard.press("Enter")
    page.wait_for_selector('[data-field="users"].has-error')
    users = page.locator("#id_users")
    assert users.get_attribute("aria-invalid") == "true"
    described = (users.get_attribute("aria-describedby") or "").split()
    assert "id_users_helptext" in described
    assert "id_users_error" in described
    assert "at least 1" in page.inner_text("#id_users_error")
    assert page.inner_text("#id_users_helptext")  # the help is on the page too
    assert active_matches(page, "#id_users")

    # Corrected: the mark and the link go with the error.
    page.fill("#id_users", "10")
    page.focus("[data-run]")
    page.keyboard.press("Enter")
    page.wait_for_function("!document.querySelector('[data-field=users].has-error')")
    assert users.get_attribute("aria-invalid") is None
    described = (users.get_attribute("aria-describedby") or "").split()
    assert "id_users_error" not in described
    assert "id_users_helptext" in described
    page.wait_for_selector('table.data[data-table="repetition"]', timeout=30_000)
    assert errors == []


def test_the_answer_button_says_hide_once_open(live_site, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_site}/course/cache-layers/")
    summary = page.locator('details[data-question="0"] summary')
    assert "Show the answer" in summary.inner_text()
    assert "Hide the answer" not in summary.inner_text()
    summary.click()
    assert "Hide the answer" in summary.inner_text()
    assert "Show the answer" not in summary.inner_text()
    summary.click()
    assert "Show the answer" in summary.inner_text()


def test_a_lesson_is_read_after_its_reading_time_with_the_text_on_screen(
    live_site,  # noqa: F811
    browser,
):
    text = lesson_text("cache-layers")
    assert text is not None
    needed_s = text.reading_minutes * 60 * 0.5  # lesson.js READ_SHARE
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.clock.install()
    page.goto(f"{live_site}/course/cache-layers/")
    chip = page.locator("[data-chip-read]")
    assert chip.inner_text() == "Not read yet"

    # A quick scroll to the end and a few seconds there: not read.
    page.keyboard.press("End")
    page.clock.run_for(5_000)
    page.wait_for_timeout(300)
    assert chip.inner_text() == "Not read yet"

    # Time with the text scrolled away does not count.
    page.clock.run_for(int(needed_s * 1000))
    page.wait_for_timeout(300)
    assert chip.inner_text() == "Not read yet"

    # With the text on screen, for most but not all of the time: still not read.
    page.locator("[data-lesson-text] p").nth(3).scroll_into_view_if_needed()
    page.wait_for_timeout(200)  # the observer sees the text
    page.clock.run_for(int(needed_s * 1000) - 20_000)
    page.wait_for_timeout(300)
    assert chip.inner_text() == "Not read yet"

    # The rest of it: read, and recorded (the chip changes once the server says so).
    page.clock.run_for(25_000)
    page.wait_for_function(
        "document.querySelector('[data-chip-read]').textContent === 'Read'",
        timeout=10_000,
    )
    page.reload()
    assert page.locator("[data-chip-read]").inner_text() == "Read"
