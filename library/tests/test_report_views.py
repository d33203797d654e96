"""The report's pages and admin: who may do what, CSRF, Cancel, Resume, CSV."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import JobStatus
from library import report
from library.permissions import RUN_REPORT, permission_get
from library.tests.test_report import CHUNK, LOANS, make_loans, row, run, start

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> User:
    boss = User.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    boss.user_permissions.add(permission_get(RUN_REPORT))
    return boss


@pytest.fixture
def reader() -> User:
    return User.objects.create_user("reader1", password="pw-reader-123")


def signed_in(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def csrf_token(client: Client, url: str) -> str:
    client.get(url)
    return str(client.cookies["csrftoken"].value)


@pytest.fixture
def loans() -> dict[str, Any]:
    return make_loans()


def test_start_page_is_for_staff_only(client, staff, reader):
    response = client.get("/jobs/reports/monthly/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert signed_in(reader).get("/jobs/reports/monthly/").status_code == 403
    assert signed_in(reader).post("/jobs/reports/monthly/", {}).status_code == 403
    page = signed_in(staff).get("/jobs/reports/monthly/")
    assert page.status_code == 200
    assert b"Start the report" in page.content
    assert "no-store" in page["Cache-Control"] or "max-age=0" in page["Cache-Control"]


def test_starting_a_report_needs_the_csrf_token(staff, loans):
    client = signed_in(staff, csrf=True)
    form = {"month": "2025-03", "branch": "", "chunk": "10", "pause_ms": "0"}
    assert client.post("/jobs/reports/monthly/", form).status_code == 403
    assert not JobStatus.objects.exists()
    token = csrf_token(client, "/jobs/reports/monthly/")
    response = client.post(
        "/jobs/reports/monthly/", {**form, "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 303
    job = JobStatus.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.created_by == staff
    assert job.params["month"] == "2025-03"
    assert job.params["chunk"] == 10
    assert job.params["total"] == LOANS


def test_bad_form_values_are_shown_not_started(staff):
    client = signed_in(staff)
    response = client.post(
        "/jobs/reports/monthly/", {"month": "March", "chunk": "0", "branch": ""}
    )
    assert response.status_code == 400
    assert b"Give a month like 2025-03." in response.content
    assert not JobStatus.objects.exists()


def test_empty_month_means_every_month(staff, loans):
    client = signed_in(staff)
    client.post("/jobs/reports/monthly/", {"month": "", "chunk": "500", "branch": ""})
    assert JobStatus.objects.get().params["month"] == "all"


def test_detail_page_shows_progress_to_its_starter_and_the_right_only(
    staff, reader, loans
):
    job = start(user=staff)
    run(job, lambda job, checkpoint, progress: None)
    page = signed_in(staff).get(f"/jobs/{job.pk}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'aria-valuenow="100"' in text
    assert f"{LOANS} of {LOANS} loans" in text
    assert f'href="/jobs/{job.pk}/report.csv"' in text
    assert signed_in(reader).get(f"/jobs/{job.pk}/").status_code == 403
    # Being staff is not the right: the page polls the job's status, which is not
    # theirs to read (jobs.access).
    other = User.objects.create_user("other-staff", is_staff=True)
    assert signed_in(other).get(f"/jobs/{job.pk}/").status_code == 403
    other.user_permissions.add(permission_get(RUN_REPORT))
    assert signed_in(other).get(f"/jobs/{job.pk}/").status_code == 200


def test_page_cancel_button_stops_the_running_report(staff, loans):
    job = start(user=staff)
    client = signed_in(staff, csrf=True)
    token = csrf_token(client, f"/jobs/{job.pk}/")
    pressed = []

    def press_cancel(job_, checkpoint, progress):
        if checkpoint["processed"] == 2 * CHUNK:
            # Without the token the POST is refused and nothing changes.
            assert client.post(f"/jobs/{job.pk}/cancel").status_code == 403
            assert row(job).cancel_requested_at is None
            response = client.post(
                f"/jobs/{job.pk}/cancel",
                HTTP_X_CSRFTOKEN=token,
                HTTP_ACCEPT="application/json",
            )
            pressed.append(response)

    assert run(job, press_cancel) == "cancelled"
    assert pressed[0].status_code == 202
    assert pressed[0].json() == {"outcome": "requested"}
    stopped = row(job)
    assert stopped.cancel_reason == report.REASON_USER
    assert stopped.checkpoint["processed"] == 2 * CHUNK


def test_resume_button_requeues_and_the_report_completes(staff, loans):
    job = start(user=staff)
    report.report_cancel(job_id=job.pk, reason="x")  # still queued: cancelled
    client = signed_in(staff, csrf=True)
    token = csrf_token(client, f"/jobs/{job.pk}/")
    response = client.post(
        f"/jobs/{job.pk}/resume", HTTP_X_CSRFTOKEN=token, HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 202
    assert row(job).state == "queued"
    again = client.post(
        f"/jobs/{job.pk}/resume", HTTP_X_CSRFTOKEN=token, HTTP_ACCEPT="application/json"
    )
    assert again.status_code == 409
    assert again.json() == {"error": "a queued report cannot be resumed"}
    # Without JavaScript the form posts and comes back to the page.
    form_post = client.post(f"/jobs/{job.pk}/resume", {"csrfmiddlewaretoken": token})
    assert form_post.status_code == 303
    assert run(job) == "done"


def test_others_cannot_cancel_or_resume(staff, reader, loans):
    job = start(user=staff)
    client = signed_in(reader)
    assert client.post(f"/jobs/{job.pk}/cancel").status_code == 403
    assert client.post(f"/jobs/{job.pk}/resume").status_code == 403
    assert row(job).state == "queued"
    assert Client().post(f"/jobs/{job.pk}/cancel").status_code == 302


def test_csv_download_streams_the_finished_report(staff, reader, loans):
    job = start(user=staff, month="2025-03")
    client = signed_in(staff)
    assert client.get(f"/jobs/{job.pk}/report.csv").status_code == 409
    run(job)
    response = client.get(f"/jobs/{job.pk}/report.csv")
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="loan-report-2025-03-{str(job.pk)[:8]}.csv"'
    )
    streamed: Any = response
    body = b"".join(streamed.streaming_content).decode()
    rows = list(csv.reader(io.StringIO(body)))
    assert rows == [
        [str(value) for value in line] for line in report.report_csv_rows(row(job))
    ]
    assert rows[0] == report.CSV_COLUMNS
    assert rows[-1][1:5] == ["total", "100", "90", "10"]
    assert signed_in(reader).get(f"/jobs/{job.pk}/report.csv").status_code == 403
    assert Client().get(f"/jobs/{job.pk}/report.csv").status_code == 302


def test_a_non_staff_creator_may_follow_and_download_their_report(reader, loans):
    job = start(user=reader)
    run(job)
    client = signed_in(reader)
    assert client.get(f"/jobs/{job.pk}/").status_code == 200
    assert client.get(f"/jobs/{job.pk}/report.csv").status_code == 200


def test_unknown_report_is_404(staff):
    assert (
        signed_in(staff).get(f"/jobs/{'0' * 8}-0000-0000-0000-{'0' * 12}/").status_code
        == 404
    )


# --- admin ---------------------------------------------------------------------


def test_admin_list_shows_progress_bar_starter_and_state(admin_client, staff, loans):
    job = start(user=staff)
    run(job, lambda job_, checkpoint, progress: None, owner="w")
    JobStatus.objects.filter(pk=job.pk).update(progress=40.0, state="running")
    listing = admin_client.get("/admin/jobs/jobstatus/")
    text = listing.content.decode()
    assert listing.status_code == 200
    assert '<progress value="40" max="100"' in text
    assert ">boss<" in text
    assert "running" in text
    assert "Cancel selected jobs" in text
    assert "Resume selected reports" in text


def test_admin_cancel_action_stops_the_report_at_its_next_chunk(admin_client, loans):
    job = start()
    queued = start()
    responses = []

    def operator(job_, checkpoint, progress):
        if checkpoint["processed"] == 3 * CHUNK:
            responses.append(
                admin_client.post(
                    "/admin/jobs/jobstatus/",
                    {
                        "action": "cancel_selected",
                        "_selected_action": [job.pk, queued.pk],
                    },
                    follow=True,
                )
            )

    assert run(job, operator) == "cancelled"
    assert (
        "1 cancelled before starting, 1 asked to stop" in responses[0].content.decode()
    )
    stopped = row(job)
    assert stopped.cancel_reason == f"{report.REASON_OPERATOR} (admin)"
    assert stopped.checkpoint["processed"] == 3 * CHUNK
    assert row(queued).state == "cancelled"


def test_admin_resume_action_resumes_cancelled_reports_only(admin_client, loans):
    cancelled = start()
    run(
        cancelled,
        lambda job_, checkpoint, progress: report.report_cancel(
            job_id=job_.pk, reason="x"
        ),
    )
    done = start()
    run(done)
    response = admin_client.post(
        "/admin/jobs/jobstatus/",
        {"action": "resume_selected", "_selected_action": [cancelled.pk, done.pk]},
        follow=True,
    )
    assert "1 report(s) queued again; 1 not resumable" in response.content.decode()
    assert row(cancelled).state == "queued"
    assert run(cancelled) == "done"
    assert row(done).state == "done"


def test_admin_actions_need_staff_and_csrf(reader, loans):
    job = start()
    client = signed_in(reader)
    response = client.post(
        "/admin/jobs/jobstatus/",
        {"action": "cancel_selected", "_selected_action": [job.pk]},
    )
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
    admin = User.objects.create_superuser("root", password="pw-root-123")
    strict = signed_in(admin, csrf=True)
    refused = strict.post(
        "/admin/jobs/jobstatus/",
        {"action": "cancel_selected", "_selected_action": [job.pk]},
    )
    assert refused.status_code == 403
    assert row(job).state == "queued"
