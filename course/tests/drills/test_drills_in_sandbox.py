"""Each drill for real: its incident seeded in a sandbox of its own, its checker
failing before the fix and passing after it, the fix applied through the real admin
served by the sandbox's daphne, over HTTP, as the learner's browser would.

Then what a drill leaves behind: nothing of the operator's own system changed, and
nothing of the sandbox left once it closes, or once its supervisor was killed.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from config.processes import wait_until
from course.drills.services import drills_expire
from course.sandbox import labs_dir, sandbox_pids
from course.tests.drills.running import (
    RunningDrill,
    drill_running,
    eventually,
    failing,
)
from jobs.models import JobStatus
from tests.snapshots import operator_snapshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]
# The seeds and the checks meet what differs by database (the streams' commit grace,
# the claims, the copy of the sandbox's database), and SQLite is what `make run`
# uses: each drill is proved on both.
each_database = pytest.mark.each_database

DEAD_LETTERS = "/admin/messaging/deadletter/"
SELECTED = re.compile(r'name="_selected_action" value="([^"]+)"')


@pytest.fixture
def learner() -> User:
    return User.objects.create_user("drill-learner", password="pw-drill-1")


def selected_ids(page: str) -> list[str]:
    return SELECTED.findall(page)


def open_letters(drill: RunningDrill) -> list[str]:
    return selected_ids(drill.admin.get(DEAD_LETTERS, state="open"))


def discard(drill: RunningDrill, ids: list[str], reason: str) -> None:
    answer = drill.admin.action(DEAD_LETTERS, "discard", ids, reason=reason)
    assert answer.status_code == 302


@each_database
def test_dead_letters_after_a_bad_deploy(learner):
    with drill_running("dead-letter-cluster", learner) as drill:
        before = drill.check()
        assert not before["passed"]
        assert len(failing(before)) == 3  # undelivered, not archived, letters open
        clusters = drill.admin.get("/admin/messaging/deadletter/clusters/")
        links = re.findall(r'class="redrive-cluster" href="([^"]+)"', clusters)
        assert len(links) == 2
        deploy = next(link for link in links if "ProgrammingError" in link)
        answer = drill.admin.confirm(deploy.replace("&amp;", "&"), "confirm-form")
        assert answer.status_code == 302
        half = drill.check()
        assert not half["passed"]
        assert len(failing(half)) == 2  # the two bad letters, still open
        discard(drill, open_letters(drill), "Names a book that does not exist.")
        after = drill.check()
        assert after["passed"], failing(after)


@each_database
def test_a_poison_message_stops_a_partition(learner):
    with drill_running("poison-partition", learner) as drill:
        before = drill.check()
        assert not before["passed"]
        page = drill.admin.get("/admin/messaging/partitionlease/")
        assert "not running" in page  # the dead holder shows as such
        freed = drill.admin.action(
            "/admin/messaging/partitionlease/", "release_dead", selected_ids(page)
        )
        assert freed.status_code == 302
        letters = eventually(lambda: open_letters(drill), "the poison's dead letter")
        assert len(letters) == 1
        # A redrive only fails again: the body has no version.
        drill.admin.action(DEAD_LETTERS, "redrive", letters)
        again = drill.check()
        assert not again["passed"]
        assert any("not discarded" in text for text in failing(again))
        letters = eventually(lambda: open_letters(drill), "the poison, dead again")
        discard(drill, letters, "No book version: it can never apply.")
        after = drill.check()
        assert after["passed"], failing(after)


@each_database
def test_a_stampede_on_a_hot_book(learner):
    with drill_running("hot-key-stampede", learner) as drill:
        before = drill.check()
        assert not before["passed"]
        assert "found no entry" in failing(before)[0]
        fact = drill.result()["facts"]["The book everyone reads"]
        book = re.search(r"#(\d+)", fact)
        assert book is not None
        metrics = drill.admin.get("/admin/cache-metrics/")
        assert ">book<" in metrics
        answer = drill.admin.action("/admin/library/book/", "mark_hot", [book[1]])
        assert answer.status_code == 302
        after = drill.check()
        assert after["passed"], failing(after)


@each_database
def test_a_full_bounded_queue(learner):
    with drill_running("full-bounded-queue", learner) as drill:
        page = drill.admin.get("/admin/bounded-queues/")
        assert 'data-bound="intake"' in page
        assert 'id="resume-workers"' in page
        # A bigger bound alone does not help: nothing takes the jobs.
        resized = drill.admin.post(
            "/admin/bounded-queues/resize/", [("bound", "intake"), ("capacity", "30")]
        )
        assert resized.status_code == 302
        before = drill.check()
        assert not before["passed"]
        assert any("suspended" in text for text in failing(before))
        resumed = drill.admin.post("/admin/bounded-queues/resume-workers/", [])
        assert resumed.status_code == 302
        after = drill.check()
        assert after["passed"], failing(after)


@each_database
def test_a_scheduled_task_held_by_a_dead_process(learner):
    task = "/admin/jobs/scheduledtaskstate/overdue_notifications/"
    with drill_running("stuck-lease", learner) as drill:
        before = drill.check()
        assert not before["passed"]
        assert len(failing(before)) == 3  # no reminders, dead holder, slot not run
        page = drill.admin.get(
            "/admin/jobs/scheduledtaskstate/overdue_5Fnotifications/change/"
        )
        assert "not running" in page
        refused = drill.admin.confirm(f"{task}run-now/", "sched-action-form")
        assert refused.status_code == 409  # the lease is held: nothing queued
        broken = drill.admin.confirm(
            f"{task}break-lease/", "sched-action-form", reason="its process died"
        )
        assert broken.status_code == 302
        ran = drill.admin.confirm(f"{task}run-now/", "sched-action-form")
        assert ran.status_code == 302
        after = drill.check()
        assert after["passed"], failing(after)
        # Running the day again is safe: each reminder is made once per loan and day.
        eventually(
            lambda: (
                drill.admin.confirm(f"{task}run-now/", "sched-action-form").status_code
                == 302
            ),
            "a second run-now to be accepted",
        )
        assert drill.check()["passed"]


@each_database
def test_a_stream_consumer_cut_by_retention(learner):
    rewind = "/admin/messaging/streamconsumer/stock_projection/rewind/"
    with drill_running("trimmed-stream", learner) as drill:
        before = drill.check()
        assert not before["passed"]
        page = drill.admin.get(rewind)
        lowest = re.search(
            r'Lowest offset to rewind to</th><td class="num">(\d+)', page
        )
        assert lowest is not None
        # Replaying the kept log over the old rows leaves counts the trim hid.
        plain = drill.admin.post(rewind, [("offset", lowest[1])])
        assert plain.status_code == 302
        stale = drill.check()
        assert not stale["passed"]
        assert any("disagree" in text for text in failing(stale))
        rebuilt = drill.admin.post(rewind, [("offset", lowest[1]), ("rebuild", "on")])
        assert rebuilt.status_code == 302
        after = drill.check()
        assert after["passed"], failing(after)


def test_a_drill_leaves_the_operators_system_as_it_was(learner, redis_client):
    """Every row and Redis key of the operator, but the drill's own record, equal."""
    before = operator_snapshot(redis_client)
    with drill_running("dead-letter-cluster", learner) as drill:
        clusters = drill.admin.get("/admin/messaging/deadletter/clusters/")
        link = re.search(r'class="redrive-cluster" href="([^"]+)"', clusters)
        assert link is not None
        drill.admin.confirm(link[1].replace("&amp;", "&"), "confirm-form")
        sandbox = drill.result()["sandbox"]
    after = operator_snapshot(redis_client)
    own = JobStatus.objects.filter(kind="drill").values_list("pk", flat=True)
    for snapshot in (before, after):
        rows = snapshot["rows"]
        assert isinstance(rows, dict)
        rows["jobs.JobStatus"] = [r for r in rows["jobs.JobStatus"] if r[0] not in own]
    assert after == before
    assert not (labs_dir() / sandbox).exists()
    assert sandbox_pids(sandbox) == []


def test_a_closed_or_abandoned_drill_leaves_nothing_behind(learner):
    with drill_running("trimmed-stream", learner) as drill:
        result = drill.result()
        sandbox, pid = result["sandbox"], result["supervisor"]["pid"]
        assert sandbox_pids(sandbox)  # its Redis server, site, worker, agent
        # The supervisor dies without a word (SIGKILL): its lease runs out, the
        # expiry finishes its record and the sweep removes what it left.
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), "the supervisor to go")
        # Its lease would run out by itself within LEASE_S; the test does not wait.
        JobStatus.objects.filter(pk=drill.job.pk).update(
            leased_until=timezone.now() - datetime.timedelta(seconds=1)
        )
        row = eventually(
            lambda: drills_expire() and JobStatus.objects.get(pk=drill.job.pk),
            "the lost drill to be finished",
        )
        assert row.state == JobStatus.State.FAILED
        wait_until(lambda: not sandbox_pids(sandbox), "the sandbox's processes to go")
        assert not (labs_dir() / sandbox).exists()


def test_an_idle_drill_closes_itself(learner):
    with drill_running("stuck-lease", learner) as drill:
        sandbox = drill.result()["sandbox"]
        row = drill.row()
        assert isinstance(row.checkpoint, dict)
        JobStatus.objects.filter(pk=row.pk).update(
            checkpoint={**row.checkpoint, "touched": 1.0}
        )
        closed = drill.closed()
        assert closed.state == JobStatus.State.DONE
        assert "without the drill's page open" in closed.message
        assert not (labs_dir() / sandbox).exists()
        assert sandbox_pids(sandbox) == []
