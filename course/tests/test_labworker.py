"""The lab worker as a real process: it runs what waits, yields the CPU, stops warmly,
and a SIGKILL mid-run leaves a failed run (not one running for ever) and no sandbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from config.cpu_priority import AUTOGROUP_LOWEST_NICE, autogroup_nice
from config.processes import ROOT, child_environment, manage_command, wait_until
from course.labs.registry import lab_get
from course.models import LabWorkerState
from course.sandbox import labs_dir, sandbox_pids
from course.services.labqueue import Requester, lab_run_request
from course.services.labwork import EXPIRED
from jobs.models import JobStatus

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

LEASE_S = 3
LEARNER = Requester(visitor="user:1", client="")


def start_worker(*extra: str) -> subprocess.Popen[bytes]:
    env = {**child_environment(), "LIBRARY_LAB_LEASE_S": str(LEASE_S)}
    return subprocess.Popen(
        manage_command("labworker", *extra),
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def state_of(job_id: uuid.UUID) -> JobStatus:
    return JobStatus.objects.get(pk=job_id)


def finished(job_id: uuid.UUID) -> JobStatus | None:
    job = state_of(job_id)
    return job if job.is_finished else None


def nice_of(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])  # field 19 of stat, counted after the command name


def test_a_worker_runs_a_waiting_model_run_below_the_librarys_priority(
    workers, redis_client
):
    process = start_worker("--live-slots", "1", "--model-slots", "1")
    workers.append(process)
    wait_until(LabWorkerState.objects.exists, "the worker's first heartbeat")
    asked = lab_run_request(
        lab=lab_get("message-queues"), params={"visibility": 17}, requester=LEARNER
    )
    assert asked.job is not None
    job_id = asked.job.pk
    done = wait_until(lambda: finished(job_id), "the model run to finish")
    assert done.state == "done", done.error
    assert done.result == lab_get("message-queues").run(
        lab_get("message-queues").validate({"visibility": 17})
    )
    assert nice_of(process.pid) == settings.LAB_NICE
    if settings.LAB_SCHED_IDLE:
        assert os.sched_getscheduler(process.pid) == os.SCHED_IDLE
    # The session's group weighs the least a group can, where the kernel groups
    # by session (None: no autogroups, or a CPU cgroup of its own).
    assert autogroup_nice(process.pid) in (AUTOGROUP_LOWEST_NICE, None)
    state = LabWorkerState.objects.get()
    assert (state.live_slots, state.model_slots, state.pid) == (1, 1, process.pid)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    assert not LabWorkerState.objects.exists()


def test_a_sigkilled_worker_leaves_a_failed_run_and_no_sandbox(workers, redis_client):
    first = start_worker("--live-slots", "1", "--model-slots", "1")
    workers.append(first)
    user = get_user_model().objects.create_user("ada", password="pw-learner-1")
    # A live run long enough to be caught in the middle: 60 lines, 100 ms apart.
    asked = lab_run_request(
        lab=lab_get("streaming-responses"),
        params={"lines": 60, "line_ms": 100},
        requester=Requester(visitor=f"user:{user.pk}", client="", user=user),
        live=True,
    )
    assert asked.job is not None
    job_id = asked.job.pk
    wait_until(
        lambda: state_of(job_id).message.startswith("live:"), "the live part to start"
    )
    sandboxes = [
        json.loads(manifest.read_text())["id"]
        for manifest in labs_dir().glob("*/sandbox.json")
        if json.loads(manifest.read_text()).get("owner_pid") == first.pid
    ]
    assert len(sandboxes) == 1
    sandbox_id = sandboxes[0]
    assert sandbox_pids(sandbox_id)  # its daphne, its Redis server, its child
    first.send_signal(signal.SIGKILL)  # the worker only: its sandbox lives on
    first.wait()
    assert sandbox_pids(sandbox_id)

    # Another worker's heartbeat fails the run once its lease has run out, and
    # sweeps the dead worker's sandbox.
    workers.append(start_worker("--live-slots", "1", "--model-slots", "1"))
    failed = wait_until(lambda: finished(job_id), "the run to fail")
    assert (failed.state, failed.error) == ("failed", EXPIRED)
    wait_until(lambda: not sandbox_pids(sandbox_id), "the sandbox's processes to go")
    wait_until(
        lambda: not (labs_dir() / sandbox_id).exists(), "the sandbox's directory to go"
    )
