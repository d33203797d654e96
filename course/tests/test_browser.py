"""Drive the lab from a real browser against real daphne and lab worker processes."""

import subprocess

import pytest

from config.processes import (
    ROOT,
    child_environment,
    free_port,
    manage_command,
    stop,
    wait_listening,
)
from course.lessons import LESSONS
from course.tests.labwork import browser_owns
from tests.browser import needs_chromium

SHOTS = ROOT / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.processes,
    needs_chromium,
]


@pytest.fixture
def live_site(transactional_db, redis_client):
    """A daphne server and a lab worker on the test database; yields the base URL."""
    env = child_environment()
    port = free_port()
    server = subprocess.Popen(
        [*manage_command()[:1], "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "config.asgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = subprocess.Popen(
        manage_command("labworker", "--live-slots", "1", "--model-slots", "1"),
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_listening(port, server)
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
        # Diagrams that give the prediction away are folded until then: see it all.
        page.click("[data-predict-reveal]")
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


def test_predict_first_holds_the_answer_until_the_learner_predicts(
    live_site, browser, monkeypatch
):
    """The parts giving the answer away are closed, out of sight and out of the
    accessibility tree before a prediction; predicting opens them, fills the lab's
    field and a run that kept the prediction opens them on reload. Without
    JavaScript the same form works through the server."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from course.labs.registry import lab_get
    from course.selectors import PREDICTION_KEY
    from course.textbook import cell_text, default_tables, lesson_text, table_cell
    from jobs.models import JobStatus

    SHOTS.mkdir(exist_ok=True)
    slug = "hot-key-and-stampede-effect"
    text = lesson_text(slug)
    assert text is not None
    spec = text.predict
    assert spec is not None
    answer = cell_text(
        table_cell(default_tables(slug), spec.table, spec.row, spec.column)
    )
    for name, width in (("desktop", 1280), ("phone", 390)):
        page = browser.new_page(viewport={"width": width, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error, errors=errors: errors.append(str(error)))
        page.goto(f"{live_site}/course/{slug}/")
        body = page.locator("[data-lesson-text]")
        holds = page.locator("details[data-answer-hold]")
        assert holds.count() >= 1
        for index in range(holds.count()):
            assert holds.nth(index).get_attribute("open") is None
            assert not holds.nth(index).locator(".answer-hold-body").is_visible()
        # Not in what is drawn, nor in what a screen reader is given.
        assert answer not in body.inner_text()
        assert answer not in body.aria_snapshot()
        assert not page.locator(
            'table[data-table="shards"], [data-table="shards"]'
        ).first.is_visible()
        page.screenshot(path=str(SHOTS / f"predict-first-{name}-before.png"))

        page.fill("#predict-first-value", "55")
        page.click("[data-predict-keep]")
        for index in range(holds.count()):
            assert holds.nth(index).get_attribute("open") is not None
        assert answer in body.inner_text()
        assert answer in body.aria_snapshot()
        assert page.input_value("#id_prediction") == "55"
        assert "55 %" in page.locator("[data-predict-status]").inner_text()
        page.locator('[data-table="shards"]').scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"predict-first-{name}-after.png"))

        # The question follows the learner's parameters.
        page.fill("#id_shards", "8")
        assert (
            "shards=8"
            in page.locator("#predict-first [data-predict-context]").inner_text()
        )
        assert errors == []
        page.close()

    # A run that kept its prediction opens the folds when its page is reloaded.
    lab = lab_get(slug)
    result = lab.run(lab.defaults())
    kept = JobStatus.objects.create(
        kind="lab", name=slug, state="done", result=result,
        params={**result["params"], PREDICTION_KEY: 70},
    )  # fmt: skip
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    browser_owns(page.context, live_site, kept)
    page.goto(f"{live_site}/course/{slug}/?job={kept.id}")
    assert page.locator("details[data-answer-hold][open]").count() == holds_count(page)
    assert answer in page.locator("[data-lesson-text]").inner_text()
    page.close()

    # Without JavaScript: the top form is a GET the server answers with the folds open.
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{live_site}/course/{slug}/")
    assert answer not in page.locator("[data-lesson-text]").inner_text()
    page.click("[data-predict-reveal]")
    page.wait_for_url("**reveal=1**")
    assert page.locator("details[data-answer-hold][open]").count() == holds_count(page)
    assert answer in page.locator("[data-lesson-text]").inner_text()
    context.close()


def holds_count(page) -> int:
    count = page.locator("details[data-answer-hold]").count()
    assert count >= 1
    return count


def test_a_diagram_opens_full_size_on_a_phone_and_compare_stays_narrow(
    live_site, browser, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from course.labs.registry import lab_get
    from jobs.models import JobStatus

    SHOTS.mkdir(exist_ok=True)
    slug = "hot-key-and-stampede-effect"
    page = browser.new_page(viewport={"width": 390, "height": 844}, has_touch=True)
    page.goto(f"{live_site}/course/{slug}/")
    link = page.locator("a.diagram-zoom").first
    link.scroll_into_view_if_needed()
    drawn = link.locator("img").bounding_box()
    assert drawn is not None
    assert drawn["width"] < 390  # on the page it is squeezed to the column
    link.tap()
    dialog = page.locator("dialog.diagram-dialog")
    dialog.wait_for(state="visible")
    image = dialog.locator("img")
    page.wait_for_function("el => el.complete && el.naturalWidth > 0",
                           arg=image.element_handle())  # fmt: skip
    full = image.bounding_box()
    assert full is not None
    assert full["width"] >= 720  # drawn size: 13 px labels are 13 px again
    page.screenshot(path=str(SHOTS / "diagram-full-size-phone.png"))
    dialog.locator("button", has_text="+").click()
    assert image.bounding_box()["width"] > full["width"]
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0

    # Two runs whose tables differ in width, side by side on a phone.
    lab = lab_get(slug)
    runs = []
    for params in ({}, {"shards": 8}):
        result = lab.run(lab.validate(params))
        runs.append(JobStatus.objects.create(
            kind="lab", name=slug, params=result["params"], state="done",
            result=result,
        ))  # fmt: skip
    browser_owns(page.context, live_site, *runs)
    page.goto(f"{live_site}/course/{slug}/compare?run={runs[0].id}&run={runs[1].id}")
    page.wait_for_load_state("networkidle")
    assert page.locator("td.is-moved").count() > 0
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, "the compare page scrolls sideways on a phone"
    page.screenshot(path=str(SHOTS / "compare-phone.png"), full_page=True)

    # No lesson scrolls sideways on a phone, with every fold and answer open.
    for lesson in LESSONS:
        page.goto(f"{live_site}/course/{lesson.slug}/?reveal=1")
        page.evaluate(
            "document.querySelectorAll('details').forEach(d => d.open = true)"
        )
        overflow = page.evaluate(
            "document.documentElement.scrollWidth"
            " - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{lesson.slug} scrolls sideways at 390 px"
