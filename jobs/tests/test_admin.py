import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from jobs.models import JobStatus
from jobs.permissions import RUN_REPORT
from library.permissions import permission_get

pytestmark = pytest.mark.django_db


def test_admin_lists_jobs_read_only(admin_client):
    job = JobStatus.objects.create(kind="lab", name="message-queues", params={})
    listing = admin_client.get("/admin/jobs/jobstatus/?state=queued&kind=lab")
    assert listing.status_code == 200
    assert b"message-queues" in listing.content
    detail = admin_client.get(f"/admin/jobs/jobstatus/{job.pk}/change/")
    assert detail.status_code == 200
    assert b'name="_save"' not in detail.content  # nothing to save: read-only
    assert admin_client.get("/admin/jobs/jobstatus/add/").status_code == 403


def view_only_staff() -> Client:
    """Return a client of a staff user who may only look at job statuses."""
    user = get_user_model().objects.create_user("onlooker", is_staff=True)
    user.user_permissions.add(permission_get("jobs.view_jobstatus"))
    client = Client()
    client.force_login(user)
    return client


def test_a_view_only_operator_is_not_offered_cancel_or_resume():
    JobStatus.objects.create(kind="report", name="monthly", params={})
    listing = view_only_staff().get("/admin/jobs/jobstatus/")
    assert listing.status_code == 200
    assert b"cancel_selected" not in listing.content
    assert b"resume_selected" not in listing.content


def test_a_view_only_operator_cannot_cancel_or_resume_a_job():
    client = view_only_staff()
    queued = JobStatus.objects.create(kind="report", name="monthly", params={})
    cancelled = JobStatus.objects.create(
        kind="report", name="monthly", params={}, state=JobStatus.State.CANCELLED
    )
    client.post(
        "/admin/jobs/jobstatus/",
        {"action": "cancel_selected", "_selected_action": [queued.pk]},
    )
    client.post(
        "/admin/jobs/jobstatus/",
        {"action": "resume_selected", "_selected_action": [cancelled.pk]},
    )
    queued.refresh_from_db()
    cancelled.refresh_from_db()
    assert (queued.state, queued.cancel_requested_at) == (JobStatus.State.QUEUED, None)
    assert cancelled.state == JobStatus.State.CANCELLED


def test_the_report_right_lets_an_operator_cancel():
    client = view_only_staff()
    user = get_user_model().objects.get(username="onlooker")
    user.user_permissions.add(permission_get(RUN_REPORT))
    queued = JobStatus.objects.create(kind="report", name="monthly", params={})
    client.post(
        "/admin/jobs/jobstatus/",
        {"action": "cancel_selected", "_selected_action": [queued.pk]},
    )
    queued.refresh_from_db()
    assert queued.state == JobStatus.State.CANCELLED
