"""Drive the lab from a real browser against real daphne and lab worker processes."""

import subprocess

import pytest

from tests.browser import needs_chromium
from tests.processes import (
    ROOT,
    child_env,
    free_port,
    manage,
    stop,
    wait_for_port,
)

SHOTS = ROOT / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.processes,
    needs_chromium,
]


@pytest.fixture
def live_site(transactional_db, redis_client):
    """A daphne server and a lab worker on the test database; yields the base URL."""
    env = child_env()
    port = free_port()
    server = subprocess.Popen(
        [*manage()[:1], "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "config.asgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = subprocess.Popen(
        manage("labworker", "--live-slots", "1", "--model-slots", "1"),
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, server)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(worker)
        stop(server)


def test_run_cache_layers_in_the_browser(live_site, browser):
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    page.goto(f"{live_site}/course/")
    page.screenshot(path=str(SHOTS / "course-index-desktop.png"), full_page=True)

    page.goto(f"{live_site}/course/cache-layers/")
    page.click("[data-run]")
    page.wait_for_selector('table.data[data-table="repetition"]', timeout=30_000)
    origin = page.locator(
        'table[data-table="repetition"] td[data-column="origin_queries"]'
    )
    assert origin.inner_text() == "600"
    chain_origin = page.locator('table[data-table="chain"] tr', has_text="origin")
    assert "53" in chain_origin.inner_text()
    assert (
        page.locator(
            'table[data-table="repetition"] td[data-column="unique_keys"]'
        ).inner_text()
        == "53"
    )
    assert page.locator("svg.lab-chart-svg rect").count() == 4
    assert page.locator("[data-state]").inner_text() == "done"
    assert "?job=" in page.url
    page.wait_for_timeout(600)  # let the progress bar finish its transition
    page.screenshot(path=str(SHOTS / "lesson-cache-layers-desktop.png"), full_page=True)

    # A reload resumes from the address and shows the finished run again.
    page.reload()
    page.wait_for_selector("svg.lab-chart-svg", timeout=10_000)
    assert page.locator('td[data-column="unique_keys"]').inner_text() == "53"

    # A value the experiment cannot run with is answered beside its field.
    page.fill("#id_users", "0")
    page.click("[data-run]")
    page.wait_for_selector('[data-field="users"].has-error')
    assert (
        "at least 1" in page.locator('[data-field="users"] .field-error').inner_text()
    )

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.goto(f"{live_site}/course/")
    phone.screenshot(path=str(SHOTS / "course-index-phone.png"), full_page=True)
    phone.goto(f"{live_site}/course/message-queues/")
    phone.click("[data-run]")
    phone.wait_for_selector('table.data[data-table="depth"]', timeout=30_000)
    phone.wait_for_timeout(600)
    phone.screenshot(
        path=str(SHOTS / "lesson-message-queues-phone.png"), full_page=True
    )
    assert errors == []


def test_predict_run_compare_and_progress_in_the_browser(
    live_site, browser, monkeypatch
):
    """A learner signs in, predicts, runs, reads the comparison, opens an answer."""
    # Playwright's sync API runs an event loop in this thread; the ORM calls below
    # are plain blocking reads of the test database, made between page steps.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.contrib.auth import get_user_model

    from course.labs.harness.live import wait_until
    from course.models import LessonProgress
    from course.textbook import default_tables, lesson_text, table_cell

    get_user_model().objects.create_user("reader-b", password="pw-reader-b-1")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_site}/accounts/login/?next=/course/invalidation/")
    page.fill("#id_login", "reader-b")
    page.fill("#id_password", "pw-reader-b-1")
    page.click("form.form button.btn-primary")
    page.wait_for_url("**/course/invalidation/")

    text = lesson_text("invalidation")
    assert text is not None
    spec = text.predict
    assert spec is not None
    expected = table_cell(
        default_tables("invalidation"), spec.table, spec.row, spec.column
    )
    page.fill("#id_prediction", "7")
    page.click("[data-run]")
    page.wait_for_selector("[data-prediction-check]", timeout=30_000)
    assert page.locator("[data-predicted]").inner_text().startswith("7")
    assert page.locator("[data-model-value]").inner_text().startswith(f"{expected}")
    assert "You ran the defaults" in page.locator("[data-interpretation]").inner_text()

    page.click('details[data-question="1"] summary')
    # Read by the button (the reading time is test_lesson_a11y_browser.py's).
    page.click("[data-mark-read] button")

    def recorded() -> bool:
        row = LessonProgress.objects.filter(slug="invalidation").first()
        return row is not None and row.read_at is not None and row.answered == [1]

    wait_until(recorded, what="the learner's progress", timeout=20)
    assert LessonProgress.objects.get(slug="invalidation").lab_runs == 1
    page.goto(f"{live_site}/course/")
    assert "1 of 7 read" in page.locator("main").inner_text()
    assert errors == []


@pytest.mark.parametrize(
    "slug", ["cache-layers", "dead-letter-queues", "server-sent-events"]
)
def test_lesson_pages_look_right_on_desktop_and_phone(live_site, browser, slug):
    """One lesson per kind, as a textbook page: no sideways scroll, figures loaded."""
    SHOTS.mkdir(exist_ok=True)
    for name, width in (("desktop", 1280), ("phone", 390)):
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(f"{live_site}/course/{slug}/")
        page.wait_for_load_state("networkidle")
        # Every diagram is served as SVG and drawn with a real size.
        sources = page.eval_on_selector_all(
            "figure.diagram img", "els => els.map(e => e.currentSrc || e.src)"
        )
        assert sources
        for source in sources:
            answer = page.request.get(source)
            assert answer.status == 200
            assert answer.headers["content-type"].startswith("image/svg+xml")
        images = page.locator("figure.diagram img")
        for index in range(images.count()):
            image = images.nth(index)
            image.scroll_into_view_if_needed()  # they load lazily
            image.wait_for(state="visible")
            page.wait_for_function(
                "el => el.complete && el.getBoundingClientRect().height > 40",
                arg=image.element_handle(),
            )
        overflow = page.evaluate(
            "document.documentElement.scrollWidth"
            " - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{slug} scrolls sideways at {width} px"
        page.screenshot(path=str(SHOTS / f"lesson-{slug}-{name}.png"), full_page=True)
        page.close()


def test_sign_up_verify_sign_in_run_live_and_see_progress(
    live_site, browser, monkeypatch
):
    """A new learner: sign up, verify the address, sign in, run the live part,
    and find the run on the account page. The mail is read from the server's
    console output (the development mail backend)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from allauth.account.models import EmailAddress

    from course.models import LabRun

    page = browser.new_page(viewport={"width": 390, "height": 844})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_site}/course/delivery-semantics/")
    assert page.locator("#id_live").is_disabled()  # no account: model only
    page.click("[data-field=live] >> text=Sign up")  # the invitation beside the box
    page.fill("#id_username", "grace")
    page.fill("#id_email", "grace@example.org")
    page.fill("#id_password1", "a-long-pass-phrase-1")
    page.fill("#id_password2", "a-long-pass-phrase-1")
    page.screenshot(path=str(SHOTS / "account-sign-up-phone.png"), full_page=True)
    page.click("form.account-form button[type=submit]")
    page.wait_for_url("**/accounts/confirm-email/")
    # The key of the address's confirmation, as the link in the mail carries it.
    address = EmailAddress.objects.get(email="grace@example.org")
    assert not address.verified
    from allauth.account.models import EmailConfirmationHMAC

    key = EmailConfirmationHMAC(address).key
    page.goto(f"{live_site}/accounts/confirm-email/{key}/")
    page.click("form.account-form button[type=submit]")
    page.wait_for_load_state()
    address.refresh_from_db()
    assert address.verified
    if "/accounts/login/" in page.url:  # confirmation signs in only in its session
        page.fill("#id_login", "grace")
        page.fill("#id_password", "a-long-pass-phrase-1")
        page.click("form.account-form button[type=submit]")
        page.wait_for_load_state()

    page.goto(f"{live_site}/course/delivery-semantics/")
    assert not page.locator("#id_live").is_disabled()
    page.check("#id_live")
    page.fill("#id_messages", "6")
    page.click("[data-run]")
    page.wait_for_selector('table.data[data-table="live_modes"]', timeout=180_000)
    assert page.locator("[data-state]").inner_text() == "done"
    run = LabRun.objects.get()
    assert run.live
    assert run.visitor.startswith("user:")

    page.goto(f"{live_site}/account/")
    assert "Your progress across the course" in page.content()
    row = page.locator('.account-lessons li[data-lesson="delivery-semantics"]')
    assert row.locator("[data-runs]").inner_text() == "1 run"
    assert page.locator("text=model + live").count() == 1
    page.screenshot(path=str(SHOTS / "account-progress-phone.png"), full_page=True)
    assert errors == []
