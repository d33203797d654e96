"""Two drills clicked through in a real browser: the drill page on the site, the
sandbox's admin in the tab its sign-in link opens, the check back on the drill page.
"""

from __future__ import annotations

import subprocess

import pytest

from config.processes import (
    ROOT,
    child_environment,
    free_port,
    manage_command,
    stop,
    wait_listening,
    wait_until,
)
from jobs.models import JobStatus
from tests.browser import axe_violations, needs_axe, needs_chromium

SHOTS = ROOT / "screenshots"
# The sandbox's processes run niced: on a loaded machine they answer late. Every
# wait of these tests ends as soon as its condition holds; the deadlines are only
# for a hung process.
READY_MS = 180_000
PASSWORD = "pw-drill-browser-1"

pytestmark = [pytest.mark.browser, pytest.mark.processes, needs_chromium, needs_axe]


@pytest.fixture
def site(transactional_db, redis_client, monkeypatch):
    """The site on a daphne of its own (it starts the drills' supervisors)."""
    # Playwright's sync API runs an event loop in this thread; the ORM calls below
    # are plain blocking reads of the test database, made between page steps.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.contrib.auth.models import User

    User.objects.create_user("drill-reader", password=PASSWORD)
    port = free_port()
    server = subprocess.Popen(
        [*manage_command()[:1], "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "config.asgi:application"],
        cwd=ROOT, env=child_environment(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_listening(port, server)
        yield f"http://127.0.0.1:{port}"
    finally:
        # Close the drills first, as the page's Stop does: their supervisors are the
        # server's children, and stopping the server kills its whole family, which
        # would leave a row running with nobody to finish it.
        def open_drills():
            return JobStatus.objects.filter(kind="drill").exclude(
                state__in=JobStatus.FINISHED
            )

        for job in open_drills():
            JobStatus.objects.filter(pk=job.pk).update(
                cancel_requested_at=job.created_at
            )
        try:
            wait_until(
                lambda: not open_drills().exists(),
                "the drills to close",
                timeout=READY_MS / 1000,
            )
        finally:
            stop(server)


def sign_in(page, site: str, slug: str) -> None:
    page.context.set_default_timeout(READY_MS)
    page.goto(f"{site}/accounts/login/?next=/course/drills/{slug}/")
    page.fill("#id_login", "drill-reader")
    page.fill("#id_password", PASSWORD)
    page.click("form.form button.btn-primary")
    page.wait_for_url(f"**/course/drills/{slug}/")


def start(page, shot: str):
    """Start the drill on its page; return the sandbox admin's tab once signed in."""
    page.click("#drill-start")
    page.wait_for_selector("#drill-signin", timeout=READY_MS)
    page.screenshot(path=str(SHOTS / f"{shot}-ready-desktop.png"), full_page=True)
    with page.context.expect_page() as opened:
        page.click("#drill-signin")
    admin = opened.value
    admin.wait_for_load_state()
    assert admin.url.endswith("/admin/")
    return admin


def check_passes(page, shot: str) -> None:
    # "Still moving" asks to check again; anything else is the verdict.
    for _ in range(5):
        page.click("#drill-check")
        result = page.wait_for_selector("[data-drill-result]", timeout=READY_MS)
        if result.get_attribute("data-drill-result") != "settling":
            break
    assert result.get_attribute("data-drill-result") == "passed"
    violations = axe_violations(page)  # the verdict, the steps, the controls
    assert violations == [], violations
    page.screenshot(path=str(SHOTS / f"{shot}-passed-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    page.wait_for_selector('[data-drill-result="passed"]')
    page.screenshot(path=str(SHOTS / f"{shot}-passed-phone.png"), full_page=True)
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0  # no sideways scroll on a phone
    page.set_viewport_size({"width": 1280, "height": 900})


def test_dead_letters_drill_in_the_browser(site, browser):
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, site, "dead-letter-cluster")
    page.screenshot(path=str(SHOTS / "drill-dead-letters-desktop.png"), full_page=True)
    violations = axe_violations(page)  # the drill's brief, before it starts
    assert violations == [], violations
    admin = start(page, "drill-dead-letters")
    base = admin.url.removesuffix("/admin/")
    admin.goto(f"{base}/admin/messaging/deadletter/clusters/")
    admin.screenshot(path=str(SHOTS / "drill-dead-letters-clusters.png"))
    admin.locator("tr", has_text="ProgrammingError").locator(
        "a.redrive-cluster"
    ).click()
    admin.click("#confirm-form input[type=submit]")
    admin.wait_for_url("**/deadletter/clusters/")
    admin.goto(f"{base}/admin/messaging/deadletter/?state=open")
    admin.check("#action-toggle")
    admin.select_option("select[name=action]", "discard")
    admin.click("button[name=index]")
    admin.fill("textarea[name=reason]", "Names a book that does not exist.")
    admin.click("#confirm-form input[type=submit]")
    admin.wait_for_selector(".messagelist .success")
    check_passes(page, "drill-dead-letters")
    assert errors == []


def test_stuck_lease_drill_in_the_browser(site, browser):
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, site, "stuck-lease")
    admin = start(page, "drill-stuck-lease")
    base = admin.url.removesuffix("/admin/")
    admin.goto(f"{base}/admin/jobs/scheduledtaskstate/")
    admin.click("text=overdue_notifications")
    assert "not running" in admin.locator("#content").inner_text()
    admin.screenshot(path=str(SHOTS / "drill-stuck-lease-task.png"), full_page=True)
    admin.click("a.sched-action:has-text('Break lease')")
    admin.fill("#id_reason", "Its process is gone.")
    admin.click("#sched-action-form input[type=submit]")
    admin.wait_for_selector(".messagelist .success")
    admin.click("a.sched-action:has-text('Run now')")
    admin.click("#sched-action-form input[type=submit]")
    admin.wait_for_selector(".messagelist .success")
    check_passes(page, "drill-stuck-lease")
    page.click("#drill-stop")
    page.wait_for_selector("#drill-start", timeout=READY_MS)
    assert errors == []
