import pytest

from jobs.models import JobStatus

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
