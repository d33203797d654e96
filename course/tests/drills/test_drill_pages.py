"""The drill pages and the rules of starting one, without starting any process.

The supervisor is spawned on commit; these tests run inside a transaction that never
commits, so no process starts: they see the rows the web side writes.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from django.utils.html import escape

from course.drills.catalogue import DRILLS
from course.drills.services import drill_start, drills_expire
from course.drills.state import DRILL_KIND
from course.models import LabAllowance
from jobs.models import JobStatus

pytestmark = pytest.mark.django_db
SLUG = "dead-letter-cluster"
OTHER = "stuck-lease"


def learner(name: str = "learner") -> tuple[Client, User]:
    user = User.objects.create_user(name, password="pw-learner-1")
    client = Client()
    client.force_login(user)
    return client, user


def requests_of(job: JobStatus) -> dict[str, Any]:
    """The learner's requests on a drill's row (its ``checkpoint``)."""
    assert isinstance(job.checkpoint, dict)
    return dict(job.checkpoint)


def drills_of(user: User) -> list[JobStatus]:
    return list(JobStatus.objects.filter(kind=DRILL_KIND, created_by=user))


def test_the_index_lists_six_drills_and_each_page_states_symptom_and_goal():
    page = Client().get("/course/drills/")
    assert page.status_code == 200
    html = page.content.decode()
    assert len(DRILLS) >= 6
    for drill in DRILLS:
        assert f"/course/drills/{drill.slug}/" in html
        detail = Client().get(f"/course/drills/{drill.slug}/").content.decode()
        assert escape(drill.goal) in detail
        assert escape(drill.symptom[0]) in detail
        assert "Sign in to start" in detail
        for lesson in drill.lessons:
            assert f"/course/{lesson}/" in detail
    assert Client().get("/course/drills/no-such-drill/").status_code == 404


def test_the_course_index_and_the_lessons_link_to_the_drills():
    assert "/course/drills/" in Client().get("/course/").content.decode()
    lesson = Client().get("/course/dead-letter-queues/").content.decode()
    assert f"/course/drills/{SLUG}/" in lesson
    assert (
        "/course/drills/" not in Client().get("/course/http-caching/").content.decode()
    )


def test_starting_needs_an_account():
    answer = Client().post(f"/course/drills/{SLUG}/start")
    assert answer.status_code == 403
    assert not JobStatus.objects.filter(kind=DRILL_KIND).exists()


def test_a_started_drill_is_the_learners_and_waits_for_its_supervisor():
    client, user = learner()
    answer = client.post(f"/course/drills/{SLUG}/start")
    assert answer.status_code == 303
    (job,) = drills_of(user)
    assert (job.name, job.state) == (SLUG, JobStatus.State.QUEUED)
    assert requests_of(job)["pass"]  # the digest of the token in the session
    stored = dict(client.session.items())
    assert any(k.startswith("drill-pass:") for k in stored)
    page = client.get(f"/course/drills/{SLUG}/").content.decode()
    assert "Starting" in page
    assert "Stop the drill" in page
    # Another learner sees nothing of it.
    other, _ = learner("other")
    assert other.get(f"/course/drills/{SLUG}/status.json").json() == {"state": None}
    assert "Stop the drill" not in other.get(f"/course/drills/{SLUG}/").content.decode()
    assert other.post(f"/course/drills/{SLUG}/stop").status_code == 404


def test_one_open_drill_per_learner():
    client, user = learner()
    client.post(f"/course/drills/{SLUG}/start")
    second = client.post(f"/course/drills/{OTHER}/start")
    assert second.status_code == 409
    assert "still open" in second.content.decode()
    assert len(drills_of(user)) == 1
    # Stopping a drill no supervisor took yet closes it at once.
    assert client.post(f"/course/drills/{SLUG}/stop").status_code == 303
    assert drills_of(user)[0].state == JobStatus.State.CANCELLED
    assert client.post(f"/course/drills/{OTHER}/start").status_code == 303


def test_the_operators_allowance_and_the_sites_capacity_apply():
    client, user = learner()
    LabAllowance.objects.create(user=user, live_allowed=False)
    withdrawn = client.post(f"/course/drills/{SLUG}/start")
    assert withdrawn.status_code == 403
    assert "withdrawn" in withdrawn.content.decode()
    LabAllowance.objects.filter(user=user).update(
        live_allowed=True, live_runs_per_hour=0
    )
    hourly = client.post(f"/course/drills/{SLUG}/start")
    assert hourly.status_code == 429
    assert hourly["Retry-After"] == "600"
    LabAllowance.objects.filter(user=user).delete()
    _, first = learner("first")
    drill_start(drill=DRILLS[0], user=first, spawn=False)
    with override_settings(DRILLS_OPEN=1):
        full = client.post(f"/course/drills/{SLUG}/start")
    assert full.status_code == 503
    assert full["Retry-After"] == "60"
    assert drills_of(user) == []


def test_the_status_keeps_an_open_drill_alive_and_asks_for_checks():
    client, user = learner()
    client.post(f"/course/drills/{SLUG}/start")
    job = drills_of(user)[0]
    JobStatus.objects.filter(pk=job.pk).update(
        state=JobStatus.State.RUNNING, checkpoint={**requests_of(job), "touched": 1.0}
    )
    status = client.get(f"/course/drills/{SLUG}/status.json").json()
    assert status["open"] is True
    job.refresh_from_db()
    assert requests_of(job)["touched"] > time.time() - 60
    assert client.post(f"/course/drills/{SLUG}/check").status_code == 303
    job.refresh_from_db()
    assert requests_of(job)["check"] > 0
    assert client.get(f"/course/drills/{SLUG}/status.json").json()["checking"] is True
    renewed = client.post(f"/course/drills/{SLUG}/link")
    assert renewed.status_code == 303
    assert (
        requests_of(JobStatus.objects.get(pk=job.pk))["pass"]
        != requests_of(job)["pass"]
    )


def test_a_verdict_shows_on_the_page_with_the_debrief_once_passed():
    client, user = learner()
    client.post(f"/course/drills/{SLUG}/start")
    job = drills_of(user)[0]
    asked = time.time()
    verdict = {
        "passed": False,
        "settling": False,
        "findings": [{"ok": False, "text": "3 dead letter(s) are still open."}],
    }
    JobStatus.objects.filter(pk=job.pk).update(
        state=JobStatus.State.RUNNING,
        checkpoint={**requests_of(job), "check": asked},
        result={"phase": "ready", "port": 1, "verdict": verdict, "check_for": asked},
    )
    page = client.get(f"/course/drills/{SLUG}/").content.decode()
    assert "Not yet." in page
    assert "3 dead letter(s) are still open." in page
    assert "<details>" in page  # the debrief stays folded
    passed = {**verdict, "passed": True, "findings": [{"ok": True, "text": "Fine."}]}
    JobStatus.objects.filter(pk=job.pk).update(
        result={
            "phase": "ready",
            "port": 1,
            "verdict": passed,
            "check_for": asked,
            "passed_ever": True,
        }
    )
    page = client.get(f"/course/drills/{SLUG}/").content.decode()
    assert "Passed." in page
    assert escape(DRILLS[0].debrief[0]) in page
    assert "<details>" not in page


def test_lost_supervisors_and_drills_never_taken_are_finished():
    _, user = learner()
    stale = drill_start(drill=DRILLS[0], user=user, spawn=False).job
    JobStatus.objects.filter(pk=stale.pk).update(
        state=JobStatus.State.RUNNING,
        leased_until=timezone.now() - datetime.timedelta(seconds=1),
    )
    _, other = learner("other")
    never = drill_start(drill=DRILLS[1], user=other, spawn=False).job
    JobStatus.objects.filter(pk=never.pk).update(
        created_at=timezone.now() - datetime.timedelta(minutes=5)
    )
    drills_expire()
    assert JobStatus.objects.get(pk=stale.pk).state == JobStatus.State.FAILED
    assert JobStatus.objects.get(pk=never.pk).state == JobStatus.State.FAILED


def test_the_sign_in_route_signs_nobody_in_outside_a_sandbox():
    assert Client().get("/course/drills/enter/anything/").status_code == 404
