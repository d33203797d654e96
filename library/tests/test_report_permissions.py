"""Starting, cancelling and resuming a report needs ``jobs.run_report``, not staff."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import JobStatus
from library import report
from library.permissions import RUN_REPORT, permission_get
from library.tests.test_report import row, start

pytestmark = pytest.mark.django_db

FORM = {"month": "2025-03", "branch": "", "chunk": "10", "pause_ms": "0"}
JSON = {"accept": "application/json"}


def staff_client(*, may_run: bool) -> tuple[User, Client]:
    user = User.objects.create_user("runner" if may_run else "onlooker", is_staff=True)
    if may_run:
        user.user_permissions.add(permission_get(RUN_REPORT))
    client = Client()
    client.force_login(user)
    return user, client


def test_staff_without_the_permission_cannot_start_a_report():
    _, client = staff_client(may_run=False)
    assert client.get("/jobs/reports/monthly/").status_code == 403
    assert client.post("/jobs/reports/monthly/", FORM).status_code == 403
    assert not JobStatus.objects.exists()


def test_staff_with_the_permission_start_a_report():
    user, client = staff_client(may_run=True)
    assert client.get("/jobs/reports/monthly/").status_code == 200
    assert client.post("/jobs/reports/monthly/", FORM).status_code == 303
    assert JobStatus.objects.get().created_by == user


def test_staff_without_the_permission_cannot_cancel_or_resume():
    owner, _ = staff_client(may_run=True)
    job = start(user=owner)
    _, client = staff_client(may_run=False)
    assert client.post(f"/jobs/{job.pk}/cancel", headers=JSON).status_code == 403
    assert row(job).cancel_requested_at is None
    report.report_cancel(job_id=job.pk, reason="x")  # queued, so cancelled at once
    assert client.post(f"/jobs/{job.pk}/resume", headers=JSON).status_code == 403
    assert row(job).state == JobStatus.State.CANCELLED


def test_staff_with_the_permission_cancel_and_resume():
    user, client = staff_client(may_run=True)
    job = start(user=user)
    cancelled = client.post(f"/jobs/{job.pk}/cancel", headers=JSON)
    assert cancelled.status_code == 202
    assert row(job).state == JobStatus.State.CANCELLED
    resumed = client.post(f"/jobs/{job.pk}/resume", headers=JSON)
    assert resumed.status_code == 202
    assert row(job).state == JobStatus.State.QUEUED
