"""What happens to a job whose worker died: rq retries it, and nothing stays stuck.

rq supervises its own work-horses: a job whose horse is killed is retried while its
``Retry`` policy has attempts left (``JOB_RETRY`` for ours), then lands in the failed
registry. Two gaps remain, and this module closes them:

- A cold shutdown (a second SIGTERM) kills the horse too, but leaves the job in the
  started registry until its entry expires; rq's own maintenance runs rarely (every
  ten minutes by default). ``rq_maintenance`` runs it every minute from the
  scheduler, so an abandoned job is retried or failed within a minute or two.
- A dead horse reports nothing, and rq calls no failure callback for it, so the
  job's ``JobStatus`` row would say "running" forever. ``jobstatus_reconcile``
  finds rows whose rq job failed or vanished and marks them failed, with a reason.

Only kinds whose rq job id follows from the row are reconciled here (``RQ_JOB_IDS``:
a lab run is ``lab-<row id>``). A report runs under a lease of its own, renewed per
chunk, and its module decides what an expired lease means.
"""

from __future__ import annotations

import datetime
import logging

import django_rq
from django.conf import settings
from django.utils import timezone
from rq import Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.job import JobStatus as RqStatus
from rq.registry import StartedJobRegistry

from jobs.models import JobStatus
from jobs.services import jobstatus_fail

log = logging.getLogger("jobs")

# Two more attempts after the first, a second and then five apart: enough to ride
# out a worker restarted by a deployment, short enough for a person watching a page.
JOB_RETRY = Retry(max=2, interval=[1, 5])
# A queued row younger than this may not have reached Redis yet (the enqueue is sent
# on commit), so a missing rq job only counts as lost after it.
LOST_AFTER = datetime.timedelta(minutes=5)


# JobStatus kind -> the rq job id of a row of that kind.
RQ_JOB_IDS: dict[str, str] = {"lab": "lab-{id}"}


def rq_job_id(job: JobStatus) -> str | None:
    """Return the id of the rq job that runs ``job``, when its kind names one."""
    pattern = RQ_JOB_IDS.get(job.kind)
    return None if pattern is None else pattern.format(id=job.id)


def _failure_text(rq_job: Job) -> str:
    result = rq_job.latest_result()
    last = (result.exc_string or "").strip().splitlines() if result else []
    detail = last[-1] if last else "the worker running it died"
    return f"The job stopped for good after its retries: {detail[:300]}"


def jobstatus_reconcile(now: datetime.datetime | None = None) -> int:
    """Fail the unfinished JobStatus rows whose rq job failed or was lost."""
    now = now or timezone.now()
    connection = django_rq.get_connection("default")
    failed = 0
    unfinished = JobStatus.objects.filter(
        state__in=(JobStatus.State.QUEUED, JobStatus.State.RUNNING),
        kind__in=list(RQ_JOB_IDS),
    )
    for job in unfinished:
        rq_id = rq_job_id(job)
        if rq_id is None:
            continue
        try:
            rq_job = Job.fetch(rq_id, connection=connection)
        except NoSuchJobError:
            if now - job.created_at > LOST_AFTER:
                jobstatus_fail(job_id=job.id, error="Its queue entry was lost.")
                failed += 1
            continue
        if rq_job.get_status(refresh=False) == RqStatus.FAILED:
            jobstatus_fail(job_id=job.id, error=_failure_text(rq_job))
            failed += 1
    if failed:
        log.warning("marked %s job status(es) failed after their workers died", failed)
    return failed


def rq_maintenance() -> dict[str, int]:
    """Hand back abandoned jobs (retry or fail them), then reconcile JobStatus rows."""
    for name in settings.RQ_QUEUES:
        StartedJobRegistry(queue=django_rq.get_queue(name)).cleanup()
    return {"reconciled": jobstatus_reconcile()}
