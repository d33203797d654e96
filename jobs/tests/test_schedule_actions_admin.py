"""Run now, pause and resume in the scheduled tasks' admin: named permissions,
confirmation pages that act only on POST (with CSRF), refusals, and the history."""

import datetime

import django_rq
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from jobs.locks import LeaseLock
from jobs.models import ScheduledTaskAction, ScheduledTaskState
from jobs.scheduler import lease_name
from jobs.scheduler_actions import scheduled_task_pause
from library.permissions import (
    PAUSE_SCHEDULED_TASK,
    RUN_SCHEDULED_TASK,
    permission_get,
)

pytestmark = pytest.mark.django_db
LIST = "/admin/jobs/scheduledtaskstate/"
TASK = f"{LIST}inventory_summary/"
PAGE = f"{TASK}change/"
# The same page as the list links to it and the actions return to it: the admin
# escapes "_" in an object id.
LINKED_PAGE = f"{LIST}inventory_5Fsummary/change/"


@pytest.fixture
def states():
    for name in ("inventory_summary", "messaging_sweep", "monthly_loan_report"):
        ScheduledTaskState.objects.create(
            name=name,
            next_run_at=datetime.datetime(2026, 3, 1, 2, tzinfo=datetime.UTC),
        )


def staff(username: str, *perms: str) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="view_scheduledtaskstate"),
        *(permission_get(perm) for perm in perms),
    )
    client = Client()
    client.force_login(user)
    return client


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_staff_without_the_permissions_see_no_buttons_and_get_403(states, redis_client):
    client = staff("onlooker")
    page = client.get(PAGE)
    assert page.status_code == 200
    html = page.content.decode()
    for path in ("run-now/", "pause/", "resume/"):
        assert f"{TASK}{path}" not in html
        assert client.get(f"{TASK}{path}").status_code == 403
        assert client.post(f"{TASK}{path}", {"reason": "x"}).status_code == 403
    assert not ScheduledTaskAction.objects.exists()
    assert ScheduledTaskState.objects.get(name="inventory_summary").paused_at is None
    assert django_rq.get_queue("default").count == 0


def test_each_permission_opens_only_its_own_actions(states, redis_client):
    runner = staff("runner", RUN_SCHEDULED_TASK)
    html = runner.get(PAGE).content.decode()
    assert f"{TASK}run-now/" in html
    assert f"{TASK}pause/" not in html
    assert runner.get(f"{TASK}pause/").status_code == 403
    assert runner.get(f"{TASK}run-now/").status_code == 200

    pauser = staff("pauser", PAUSE_SCHEDULED_TASK)
    html = pauser.get(PAGE).content.decode()
    assert f"{TASK}pause/" in html
    assert f"{TASK}run-now/" not in html
    assert pauser.get(f"{TASK}run-now/").status_code == 403
    assert pauser.get(f"{TASK}resume/").status_code == 200


def test_staff_with_the_permission_but_not_the_view_one_is_refused(
    states, redis_client
):
    user = User.objects.create_user("half", password="pw", is_staff=True)
    user.user_permissions.add(permission_get(PAUSE_SCHEDULED_TASK))
    client = Client()
    client.force_login(user)
    assert client.post(f"{TASK}pause/", {"reason": "x"}).status_code == 403
    assert ScheduledTaskState.objects.get(name="inventory_summary").paused_at is None


def test_get_only_confirms_and_post_without_a_csrf_token_is_refused(
    states, redis_client
):
    client = staff("pauser", PAUSE_SCHEDULED_TASK)
    page = client.get(f"{TASK}pause/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="csrfmiddlewaretoken"' in html
    assert 'method="post"' in html
    assert ScheduledTaskState.objects.get(name="inventory_summary").paused_at is None
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="pauser"))
    assert strict.post(f"{TASK}pause/", {"reason": "audit"}).status_code == 403
    assert ScheduledTaskState.objects.get(name="inventory_summary").paused_at is None


def test_pause_needs_a_reason_then_shows_in_the_list_with_who_and_why(
    states, redis_client
):
    client = staff("pauser", PAUSE_SCHEDULED_TASK)
    missing = client.post(f"{TASK}pause/", {"reason": "  "})
    assert missing.status_code == 200
    assert "Say why the task is paused" in missing.content.decode()
    too_long = client.post(f"{TASK}pause/", {"reason": "x" * 201})
    assert too_long.status_code == 200
    assert "at most 200 characters" in too_long.content.decode()
    assert not ScheduledTaskAction.objects.exists()

    done = client.post(f"{TASK}pause/", {"reason": "branch audit"}, follow=True)
    assert done.redirect_chain == [(LINKED_PAGE, 302)]
    assert messages_of(done) == [
        "Paused inventory_summary: its slots pass without running until it is resumed."
    ]
    html = done.content.decode()
    assert f"{TASK}resume/" in html  # the button turned into "Resume…"
    assert f"{TASK}pause/" not in html
    listing = client.get(LIST).content.decode()
    assert '">paused</span> <span class="sched-why">by pauser: branch audit' in listing
    paused_only = client.get(f"{LIST}?status=paused").content.decode()
    assert "inventory_summary" in paused_only
    assert "monthly_loan_report" not in paused_only

    again = client.post(f"{TASK}pause/", {"reason": "twice"})
    assert again.status_code == 409
    assert "already paused (by pauser since" in again.content.decode()

    resumed = client.post(f"{TASK}resume/", {"reason": ""}, follow=True)
    (message,) = messages_of(resumed)
    assert message.startswith("Resumed inventory_summary: 0 slot(s) fell in the pause")
    assert ScheduledTaskState.objects.get(name="inventory_summary").paused_at is None
    assert list(ScheduledTaskAction.objects.values_list("kind", "username")) == [
        ("resume", "pauser"),
        ("pause", "pauser"),
    ]


def test_run_now_queues_one_run_and_the_history_shows_it(
    states, redis_client, django_capture_on_commit_callbacks
):
    client = staff("runner", RUN_SCHEDULED_TASK)
    confirm = client.get(f"{TASK}run-now/").content.decode()
    assert 'id="sched-slot"' in confirm
    assert ">free<" in confirm  # the lease, read live
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(f"{TASK}run-now/", {"reason": "stock looked off"})
    assert done.status_code == 302
    (action,) = ScheduledTaskAction.objects.all()
    assert (action.kind, action.username, action.reason, action.outcome) == (
        "run_now",
        "runner",
        "stock looked off",
        "queued",
    )
    (job,) = django_rq.get_queue("default").jobs
    assert (job.func_name, job.kwargs) == (
        "jobs.tasks.scheduled_run_now",
        {"action_id": action.pk},
    )
    django_rq.get_worker("default", worker_class="rq.SimpleWorker").work(burst=True)
    page = client.get(PAGE)
    html = page.content.decode()
    assert html.count('class="sched-action-row"') == 1
    assert "stock looked off" in html
    assert '<td class="outcome" data-label="Outcome">ran (finished' in html


def test_run_now_while_the_lease_is_held_says_so_and_runs_nothing(states, redis_client):
    holder = LeaseLock(redis_client, lease_name("inventory_summary"), lease_ms=60_000)
    assert holder.acquire()
    client = staff("runner", RUN_SCHEDULED_TASK)
    confirm = client.get(f"{TASK}run-now/").content.decode()
    assert f"held by {holder.owner} until" in confirm
    refused = client.post(f"{TASK}run-now/", {"reason": ""})
    assert refused.status_code == 409
    assert f"its lease is held by {holder.owner}" in refused.content.decode()
    assert django_rq.get_queue("default").count == 0
    assert not ScheduledTaskAction.objects.exists()


def test_run_now_of_an_inline_task_is_explained_not_offered(states, redis_client):
    client = staff("runner", RUN_SCHEDULED_TASK)
    page = client.get(f"{LIST}messaging_sweep/change/").content.decode()
    assert f"{LIST}messaging_sweep/run-now/" not in page
    confirm = client.get(f"{LIST}messaging_sweep/run-now/")
    assert confirm.status_code == 200
    assert "runs inline in the scheduler" in confirm.content.decode()
    assert 'id="sched-action-form"' not in confirm.content.decode()
    refused = client.post(f"{LIST}messaging_sweep/run-now/", {"reason": ""})
    assert refused.status_code == 409
    assert not ScheduledTaskAction.objects.exists()


def test_unknown_task_and_other_methods_get_clear_answers(states, redis_client):
    client = staff("root", RUN_SCHEDULED_TASK, PAUSE_SCHEDULED_TASK)
    assert client.get(f"{LIST}no_such_task/pause/").status_code == 404
    assert client.put(f"{TASK}pause/").status_code == 405
    assert client.get(f"{TASK}pause/").status_code == 200


def test_the_task_page_shows_the_pause_note_and_history_with_reasons(
    states, redis_client
):
    pauser = User.objects.create_user("ada", is_staff=True)
    scheduled_task_pause(
        name="monthly_loan_report", user=pauser, reason="new report format"
    )
    client = staff("onlooker")
    html = client.get(f"{LIST}monthly_loan_report/change/").content.decode()
    assert 'id="sched-paused-note"' in html
    assert "by ada: new report format" in html
    assert html.count('class="sched-action-row"') == 1
    assert '<td data-label="Who">ada</td>' in html
