"""The scheduled tasks' admin: staff only, read-only, lease read from Redis."""

import datetime

import pytest
from django.contrib.auth.models import Permission, User

from jobs.locks import LeaseLock
from jobs.models import ScheduledTaskState
from jobs.scheduler import lease_name

pytestmark = pytest.mark.django_db
LIST = "/admin/jobs/scheduledtaskstate/"


@pytest.fixture
def states():
    ScheduledTaskState.objects.create(
        name="monthly_loan_report",
        next_run_at=datetime.datetime(2026, 3, 1, 2, tzinfo=datetime.UTC),
        last_run_at=datetime.datetime(2026, 2, 1, 2, tzinfo=datetime.UTC),
        last_outcome="ran",
        runs_total=4,
        skipped_total=1,
        missed_total=2,
    )
    ScheduledTaskState.objects.create(name="inventory_summary")


def test_staff_with_view_permission_sees_definition_policy_and_lease(
    client, states, redis_client, settings
):
    # The admin shows times in the site's zone; a zone away from UTC shows it does.
    settings.TIME_ZONE = "Europe/Istanbul"
    staff = User.objects.create_user("clerk", password="pw", is_staff=True)
    staff.user_permissions.add(
        Permission.objects.get(codename="view_scheduledtaskstate")
    )
    client.force_login(staff)
    holder = LeaseLock(redis_client, lease_name("monthly_loan_report"), lease_ms=60_000)
    assert holder.acquire()
    page = client.get(LIST)
    assert page.status_code == 200
    html = page.content.decode()
    assert "monthly on day 1 at 02:00 UTC (clamp at month end)" in html
    assert "catch up (last 3)" in html
    assert "every 15 min" in html
    assert "no catch-up" in html
    assert "2026-03-01 02:00:00 UTC" in html  # next run, stored UTC
    assert "2026-03-01 05:00:00 +03" in html  # the same instant, Istanbul time
    assert holder.owner in html  # the current lock holder
    assert html.count(">free<") == 1  # inventory_summary's lease is free
    # The totals share one cell, a line each (the list fits 1280 px: see
    # jobs/tests/test_scheduler_browser.py).
    cells = [
        cell.split("</td>")[0] for cell in html.split('<td class="field-totals">')[1:]
    ]
    assert any(
        all(f">{total}<" in cell for total in ("4 runs", "1 skipped", "2 missed"))
        for cell in cells
    )


def test_the_list_is_read_only_even_for_superusers(admin_client, states):
    assert admin_client.get(LIST).status_code == 200
    assert admin_client.get(f"{LIST}add/").status_code == 403
    detail = admin_client.get(f"{LIST}monthly_loan_report/change/")
    assert detail.status_code == 200
    assert b'name="_save"' not in detail.content
    assert admin_client.post(f"{LIST}monthly_loan_report/delete/").status_code == 403
    page = admin_client.post(
        LIST, {"action": "delete_selected", "_selected_action": ["inventory_summary"]}
    )
    assert page.status_code in (200, 302)
    assert ScheduledTaskState.objects.count() == 2


def test_non_staff_and_anonymous_are_sent_to_the_login(client, states):
    assert client.get(LIST).status_code == 302
    member = User.objects.create_user("reader", password="pw")
    member.user_permissions.add(
        Permission.objects.get(codename="view_scheduledtaskstate")
    )
    client.force_login(member)
    answer = client.get(LIST)
    assert answer.status_code == 302
    assert "/admin/login/" in answer["Location"]


def test_staff_without_the_view_permission_is_refused(client, states):
    staff = User.objects.create_user("intern", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(LIST).status_code == 403
