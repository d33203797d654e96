"""The scheduled tasks' actions, reached the way an operator reaches them.

The list links to each task through the admin's escaped id (``inventory_5Fsummary``:
every task name has a "_"). The task's page looked its task up without unescaping
it, found none, and showed no Run now, Pause or Resume. Here a real browser goes
from the list into a task and presses all three, against a real daphne.
"""

from __future__ import annotations

import datetime
import re

import pytest

from config.processes import free_port, start_daphne, stop
from jobs.models import ScheduledTaskAction, ScheduledTaskState
from tests.browser import needs_chromium

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


def test_an_operator_runs_pauses_and_resumes_a_task_from_the_list(
    live_site, browser, monkeypatch
):
    # Playwright's sync API runs an event loop in this thread; the ORM calls below
    # are plain blocking calls made between page steps.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("operator", password=PASSWORD)
    for name in ("inventory_summary", "monthly_loan_report"):
        ScheduledTaskState.objects.create(
            name=name,
            next_run_at=datetime.datetime(2026, 3, 1, 2, tzinfo=datetime.UTC),
        )

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_site}/admin/login/?next=/admin/jobs/scheduledtaskstate/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/jobs/scheduledtaskstate/")

    page.click("#result_list a:text-is('inventory_summary')")
    page.wait_for_url(re.compile(r".*/inventory_5Fsummary/change/$"))
    task_page = page.url

    page.click("a.sched-action:text-is('Run now…')")
    page.wait_for_url("**/inventory_summary/run-now/")
    page.fill("#id_reason", "stock looked off")
    page.click("input[type=submit][value='Run now inventory_summary']")
    page.wait_for_url(task_page)
    assert "Queued a run of inventory_summary" in page.inner_text(".messagelist")

    page.click("a.sched-action:text-is('Pause…')")
    page.wait_for_url("**/inventory_summary/pause/")
    page.fill("#id_reason", "stock-take this week")
    page.click("input[type=submit][value='Pause inventory_summary']")
    page.wait_for_url(task_page)
    assert "Paused inventory_summary" in page.inner_text(".messagelist")
    assert "stock-take this week" in page.inner_text("#sched-paused-note")

    page.click("a.sched-action:text-is('Resume…')")
    page.wait_for_url("**/inventory_summary/resume/")
    page.click("input[type=submit][value='Resume inventory_summary']")
    page.wait_for_url(task_page)
    assert "Resumed inventory_summary" in page.inner_text(".messagelist")
    # The history on the page, newest first, as the database has it.
    assert page.locator("tr.sched-action-row td.kind").all_inner_texts() == [
        "resume",
        "pause",
        "run now",
    ]
    page.close()

    actions = ScheduledTaskAction.objects.order_by("pk")
    assert [(a.kind, a.username) for a in actions] == [
        ("run_now", "operator"),
        ("pause", "operator"),
        ("resume", "operator"),
    ]
    assert ScheduledTaskState.objects.get(name="inventory_summary").paused_at is None
    assert errors == []


def test_the_list_fits_a_1280_px_screen_beside_the_sidebar(
    live_site, browser, monkeypatch
):
    """Next run, lock holder and totals are on screen, not behind a sideways scroll."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.contrib.auth import get_user_model

    from jobs.scheduler import TASKS_BY_NAME

    get_user_model().objects.create_superuser("operator", password=PASSWORD)
    for name in TASKS_BY_NAME:
        ScheduledTaskState.objects.create(
            name=name,
            next_run_at=datetime.datetime(2026, 3, 1, 2, tzinfo=datetime.UTC),
            last_run_at=datetime.datetime(2026, 2, 1, 2, tzinfo=datetime.UTC),
            last_outcome="ran",
            runs_total=123456,
            skipped_total=3,
            missed_total=2,
        )
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_site}/admin/login/?next=/admin/jobs/scheduledtaskstate/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/jobs/scheduledtaskstate/")
    assert page.locator("#nav-sidebar").is_visible()
    table, box = page.evaluate(
        "[document.querySelector('#result_list').scrollWidth,"
        " document.querySelector('#changelist-form .results').clientWidth]"
    )
    assert table <= box, f"the list is {table} px wide in a {box} px box"
    for column in ("next run (UTC, local)", "lock holder", "totals"):
        header = page.locator("#result_list thead th", has_text=column)
        right = header.bounding_box()
        assert right is not None
        assert right["x"] + right["width"] <= 1280
    assert page.locator("#result_list td.field-totals").first.is_visible()
