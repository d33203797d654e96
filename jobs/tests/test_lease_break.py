"""Breaking a scheduled task's lease whose holder is dead: only then, only by a
holder of ``jobs.run_scheduled_task``, confirmed on its own page, logged."""

import datetime
import os
import socket
import subprocess
import sys

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client

from jobs.holders import Liveness, holder_state, token_host_pid
from jobs.locks import lease_holder, lock_key
from jobs.models import ScheduledTaskState
from jobs.scheduler import lease_name, schedule_redis
from jobs.scheduler_actions import ScheduleActionError, scheduled_task_lease_break
from library.permissions import RUN_SCHEDULED_TASK, permission_get

pytestmark = pytest.mark.django_db
TASK = "inventory_summary"
LIST = "/admin/jobs/scheduledtaskstate/"
PAGE = f"{LIST}inventory_5Fsummary/change/"
BREAK = f"{LIST}{TASK}/break-lease/"


def dead_token() -> str:
    """The token of a process of this host that has exited (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return f"{socket.gethostname()}:{done.stdout.strip()}:dead0001"


def hold(owner: str, *, minutes: int = 30) -> None:
    schedule_redis().set(lock_key(lease_name(TASK)), owner, px=minutes * 60_000)


def holder() -> str | None:
    found = lease_holder(schedule_redis(), lease_name(TASK), now=_now())
    return found.owner if found else None


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def operator(username: str, *perms: str) -> tuple[Client, User]:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="view_scheduledtaskstate"),
        *(permission_get(perm) for perm in perms),
    )
    client = Client()
    client.force_login(user)
    return client, user


@pytest.fixture
def state(redis_client):
    return ScheduledTaskState.objects.create(name=TASK)


def test_a_token_names_its_host_and_pid_and_says_whether_it_runs():
    me = f"{socket.gethostname()}:{os.getpid()}:abc"
    assert token_host_pid(me) == (socket.gethostname(), os.getpid())
    assert holder_state(me).liveness is Liveness.ALIVE
    assert holder_state(dead_token()).liveness is Liveness.DEAD
    elsewhere = holder_state("another-host:1:abc")
    assert elsewhere.liveness is Liveness.UNKNOWN
    assert "another-host" in elsewhere.explanation
    assert holder_state("no-pid-here").liveness is Liveness.UNKNOWN


def test_a_dead_holders_lease_is_broken_and_logged(state):
    client, user = operator("oncall", RUN_SCHEDULED_TASK)
    owner = dead_token()
    hold(owner)
    page = client.get(PAGE).content.decode()
    assert "not running" in page  # the holder is shown dead on the task's page
    assert BREAK in page
    confirm = client.get(BREAK)
    assert confirm.status_code == 200
    assert holder() == owner  # a GET changes nothing
    answer = client.post(BREAK, {"reason": "its worker was killed"})
    assert answer.status_code == 302
    assert holder() is None
    entry = LogEntry.objects.get(user=user)
    assert "its worker was killed" in entry.change_message
    assert owner in entry.change_message


def test_a_live_or_unknown_holder_keeps_its_lease(state):
    client, _ = operator("oncall", RUN_SCHEDULED_TASK)
    for owner in (f"{socket.gethostname()}:{os.getpid()}:live", "elsewhere:42:x"):
        hold(owner)
        answer = client.post(BREAK, {"reason": "looks stuck"})
        assert answer.status_code == 409
        assert "Wait for the lease to run out" in answer.content.decode()
        assert holder() == owner


def test_breaking_needs_a_reason_the_run_permission_and_a_held_lease(state):
    hold(dead_token())
    onlooker, _ = operator("onlooker")
    assert onlooker.post(BREAK, {"reason": "x"}).status_code == 403
    assert BREAK not in onlooker.get(PAGE).content.decode()
    client, user = operator("oncall", RUN_SCHEDULED_TASK)
    assert client.post(BREAK, {"reason": ""}).status_code == 200  # form error
    assert holder() is not None
    schedule_redis().delete(lock_key(lease_name(TASK)))
    with pytest.raises(ScheduleActionError, match="free"):
        scheduled_task_lease_break(name=TASK, user=user, reason="again")
