import subprocess

import django_rq
import pytest

from course.labs.registry import lab_get
from course.services import lab_run_enqueue
from jobs.models import JobStatus
from tests.processes import ROOT, child_env, manage


@pytest.mark.processes
@pytest.mark.each_database  # the embedded default's path: SQLite and a real worker
@pytest.mark.django_db(transaction=True)
def test_real_rqworker_process_finishes_the_lab(redis_client):
    lab = lab_get("message-queues")
    job = lab_run_enqueue(lab=lab, params={"visibility": 17}, user=None)
    # committed, so the enqueue happened and another process can see the row
    assert django_rq.get_queue("labs").job_ids == [f"lab-{job.id}"]

    done = subprocess.run(
        manage("rqworker", "labs", "--burst"),
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]

    job.refresh_from_db()
    assert job.result is not None
    assert job.state == JobStatus.State.DONE, job.error
    assert job.result["tables"]["unacknowledged"]["rows"][3] == [
        17,
        "consumer-2",
        2,
        2,
        "acknowledged",
    ]
    assert job.result == lab.run(lab.validate({"visibility": 17}))
