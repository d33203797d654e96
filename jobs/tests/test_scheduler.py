import datetime

import django_rq
import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.models import JobStatus
from jobs.schedule import PERIODIC_TASKS, PeriodicTask, due_tasks

HOUR = datetime.timedelta(hours=1)
NOW = datetime.datetime(2026, 1, 31, 23, 47, tzinfo=datetime.UTC)
TASK = PeriodicTask(name="t", func="jobs.tasks.jobstatus_prune", every=HOUR)


def test_task_never_run_is_due_at_once():
    assert due_tasks((TASK,), {}, NOW) == [TASK]


def test_task_is_due_only_after_its_interval():
    assert (
        due_tasks((TASK,), {"t": NOW - HOUR + datetime.timedelta(seconds=1)}, NOW) == []
    )
    assert due_tasks((TASK,), {"t": NOW - HOUR}, NOW) == [TASK]


@pytest.mark.django_db
def test_scheduler_pass_enqueues_due_tasks_once(
    redis_client, django_capture_on_commit_callbacks
):
    # COMMIT_MODE=on_db_commit: the enqueue waits for the test transaction's "commit".
    with django_capture_on_commit_callbacks(execute=True):
        call_command("scheduler", "--once")
    queued = sorted(t.func for t in PERIODIC_TASKS if not t.inline)

    def jobs_queued() -> list[str]:
        names = {t.queue for t in PERIODIC_TASKS}
        return sorted(
            str(job.func_name)
            for name in names
            for job in django_rq.get_queue(name).jobs
            if job.func_name != "messaging.tasks.drain"
        )

    assert jobs_queued() == queued
    with django_capture_on_commit_callbacks(execute=True):
        call_command("scheduler", "--once")  # not due again within the hour
    assert jobs_queued() == queued


@pytest.mark.django_db
def test_prune_job_deletes_only_old_finished_statuses(
    redis_client, django_capture_on_commit_callbacks
):
    old = timezone.now() - datetime.timedelta(days=8)
    finished = JobStatus.objects.create(
        kind="lab", name="x", state="done", finished_at=old
    )
    running = JobStatus.objects.create(kind="lab", name="y", state="running")
    recent = JobStatus.objects.create(
        kind="lab", name="z", state="done", finished_at=timezone.now()
    )
    queue = django_rq.get_queue("default")
    with django_capture_on_commit_callbacks(execute=True):
        queue.enqueue("jobs.tasks.jobstatus_prune", older_than_days=7)
    (job,) = queue.jobs
    # In-process worker: a forked work-horse would not see this test's transaction.
    django_rq.get_worker("default", worker_class="rq.SimpleWorker").work(burst=True)
    job.refresh()
    assert job.return_value() == 1
    remaining = set(JobStatus.objects.values_list("pk", flat=True))
    assert remaining == {running.pk, recent.pk}
    assert finished.pk not in remaining
