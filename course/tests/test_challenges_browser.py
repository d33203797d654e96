"""A lesson's challenges in a real browser (#28): solve one from the keyboard, see the
progress follow on the page and the course index; axe-core on the panel.

Real daphne and lab worker (the ``live_site`` of test_browser.py), real Chromium.
"""

from __future__ import annotations

import pytest

from course.challenges.spec import lesson_challenges
from course.tests.test_browser import SHOTS, live_site  # noqa: F401 (a fixture)
from tests.browser import AXE, BLOCKING, needs_axe, needs_chromium

pytestmark = [pytest.mark.browser, pytest.mark.processes, needs_chromium]
N = len(lesson_challenges("cache-layers"))

PANEL_AXE = """async () => {
  const result = await axe.run(
    { include: [["#challenges"]] }, { resultTypes: ["violations"] }
  );
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ")),
  }));
}"""


def panel_violations(page) -> list[dict[str, object]]:
    if not page.evaluate("typeof window.axe === 'object'"):
        page.add_script_tag(path=str(AXE))
    return [v for v in page.evaluate(PANEL_AXE) if v["impact"] in BLOCKING]


def test_solve_a_challenge_and_see_the_progress_follow(live_site, browser):  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_site}/course/cache-layers/")
    chip = page.locator("[data-chip-challenges]")
    assert chip.inner_text() == f"0 of {N} challenges solved"
    card = page.locator("#challenge-edge-big-enough")
    field = card.locator("input[name=edge_capacity]")

    # A wrong answer, sent from the keyboard: the model's figures say why.
    field.fill("20")
    field.press("Enter")
    feedback = card.locator("[data-challenge-feedback]")
    feedback.locator(".alert-warning").wait_for()
    assert "Not yet: with edge_capacity=20" in feedback.inner_text()
    assert "the goal needs it ≥" in feedback.inner_text()
    assert chip.inner_text() == f"0 of {N} challenges solved"
    assert card.locator("[data-challenge-debrief]").is_hidden()

    # A hint, then the next one: each opens on request and takes the focus.
    hint = card.locator("[data-challenge-hint]")
    assert hint.inner_text() == "Show hint 1 of 2"
    hint.click()
    card.locator("[data-challenge-hints] li").first.wait_for()
    assert page.evaluate("document.activeElement.matches('[data-challenge-hints] li')")
    assert hint.inner_text() == "Show hint 2 of 2"
    hint.click()
    page.wait_for_function(
        "document.querySelectorAll('#challenge-edge-big-enough "
        "[data-challenge-hints] li').length === 2"
    )
    assert card.locator("[data-challenge-hint-form]").is_hidden()

    # The right answer: solved, debrief shown, the page's counts follow.
    field.fill("24")
    card.locator("[data-challenge-check]").click()
    card.locator("[data-challenge-debrief] strong").wait_for()
    assert "Solved" in feedback.inner_text()
    assert card.locator("[data-challenge-solved]").is_visible()
    assert chip.inner_text() == f"1 of {N} challenges solved"
    assert page.locator("[data-challenges-count]").inner_text() == f"1 of {N} solved"
    page.locator("#challenges").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "challenges-desktop.png"), full_page=True)

    # The course index and a reload show it too.
    page.goto(f"{live_site}/course/")
    badge = page.locator('[data-lesson="cache-layers"] [data-challenges]')
    assert badge.inner_text() == f"1/{N} challenges"
    page.goto(f"{live_site}/course/cache-layers/")
    assert page.locator("[data-chip-challenges]").inner_text() == (
        f"1 of {N} challenges solved"
    )
    assert "Why it works." in page.locator("#challenge-edge-big-enough").inner_text()

    # A number the server cannot read: marked invalid, with its reason.
    server = page.locator("#challenge-server-alone")
    server.locator("input[name=answer]").fill("many")
    server.locator("[data-challenge-check]").click()
    server.locator(".alert-error").wait_for()
    assert "Answer with a number" in server.inner_text()
    assert server.locator("input[name=answer]").get_attribute("aria-invalid") == "true"

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.goto(f"{live_site}/course/cache-layers/#challenges")
    phone.locator("#challenges").scroll_into_view_if_needed()
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width  # nothing wider than the phone
    phone.screenshot(path=str(SHOTS / "challenges-phone.png"), full_page=True)
    assert errors == []


@needs_axe
def test_the_challenges_panel_passes_axe(live_site, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_site}/course/worker-processes/")
    card = page.locator("#challenge-seven-workers-thirty-jobs")
    card.locator("[data-challenge-hint]").click()
    card.locator("[data-challenge-hints] li").first.wait_for()
    card.locator("input[name=answer]").fill("4")
    card.locator("[data-challenge-check]").click()
    card.locator(".alert-warning").wait_for()
    card.locator("input[name=answer]").fill("5")
    card.locator("[data-challenge-check]").click()
    card.locator("[data-challenge-debrief] strong").wait_for()
    assert panel_violations(page) == []
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.goto(f"{live_site}/course/worker-processes/")
    assert panel_violations(phone) == []


@needs_axe
def test_check_a_solved_answer_on_the_live_system(
    live_site,  # noqa: F811
    browser,
    monkeypatch,
):
    """Sign in, solve a challenge, press "Check it on the live system": the lab
    worker runs the live part in its sandbox and the verdict replaces the waiting
    line without a reload; the block passes axe and fits a phone."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("tester", password="pw-tester-live-1")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # A visitor is invited to sign up; the invitation passes axe too.
    page.goto(f"{live_site}/course/cache-strategies/")
    invitation = page.locator("#challenge-half-the-writes [data-challenge-live]")
    assert "Sign up" in invitation.inner_text()
    assert panel_violations(page) == []
    page.goto(f"{live_site}/accounts/login/?next=/course/cache-strategies/")
    page.fill("#id_login", "tester")
    page.fill("#id_password", "pw-tester-live-1")
    page.click("form.form button.btn-primary")
    page.wait_for_url("**/course/cache-strategies/")

    card = page.locator("#challenge-half-the-writes")
    live = card.locator("[data-challenge-live]")
    assert "Once the model accepts your answer" in live.inner_text()
    card.locator("input[name=flush_every]").fill("19")
    card.locator("[data-challenge-check]").click()
    card.locator("[data-challenge-debrief] strong").wait_for()
    # The button comes with the page once solved.
    page.reload()
    button = card.locator("[data-challenge-live-run]")
    assert button.inner_text() == "Check it on the live system"
    button.click()
    card.locator("[data-live-state]").wait_for()
    assert "Your live run" in card.locator("[data-live-state]").inner_text()
    card.locator("[data-live-verdict]").wait_for(timeout=180_000)
    verdict = card.locator("[data-live-verdict]").inner_text()
    assert "Confirmed on the live system" in verdict, verdict
    assert "live_strategies[write-behind].origin_writes * 2 is" in verdict
    assert card.locator("[data-live-confirmed]").is_visible()
    assert panel_violations(page) == []
    live.screenshot(path=str(SHOTS / "challenge-live-desktop.png"))

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.context.add_cookies(page.context.cookies())
    phone.goto(f"{live_site}/course/cache-strategies/#challenge-half-the-writes")
    phone.locator("#challenge-half-the-writes [data-live-verdict]").wait_for()
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width  # nothing wider than the phone
    assert panel_violations(phone) == []
    phone.locator("#challenge-half-the-writes [data-challenge-live]").screenshot(
        path=str(SHOTS / "challenge-live-phone.png")
    )
    assert errors == []
