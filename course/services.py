"""Writes of the course app: queue a lab run, and carry one out in a worker."""

from __future__ import annotations

import logging
import uuid

import django_rq
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from course.labs.base import Lab, LabError, Params
from course.labs.registry import lab_get
from course.selectors import LAB_JOB_KIND, lab_job_get
from jobs.models import JobStatus
from jobs.services import (
    jobstatus_create,
    jobstatus_fail,
    jobstatus_finish,
    jobstatus_progress,
    jobstatus_start,
)

logger = logging.getLogger(__name__)

LAB_QUEUE = "labs"
# Progress below this share is the bookkeeping before the model starts.
_MODEL_START, _MODEL_SPAN = 5.0, 90.0


def lab_run_enqueue(
    *,
    lab: Lab,
    params: Params,
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> JobStatus:
    """Record a queued lab run and enqueue it on the ``labs`` queue.

    The row and the enqueue share one transaction: with COMMIT_MODE "on_db_commit"
    django-rq sends the job to Redis only after the commit, so a worker never looks
    for a row that is not visible yet, and a rollback sends nothing.
    """
    from course.tasks import run_lab  # tasks import services; import here, not above

    checked = lab.validate(params)
    with transaction.atomic():
        job = jobstatus_create(
            kind=LAB_JOB_KIND, name=lab.slug, params=checked, user=user
        )
        django_rq.get_queue(LAB_QUEUE).enqueue(
            run_lab, str(job.id), job_id=f"lab-{job.id}", description=f"lab {lab.slug}"
        )
    return job


def lab_run_execute(*, job_id: uuid.UUID) -> None:
    """Run a queued lab and store its progress and result on the JobStatus row.

    1. Claim the row (queued -> running); a finished or cancelled row is left alone,
       so a redelivered rq job does not run the lab twice.
    2. Check the stored parameters again: the row may have been written by hand.
    3. Run the model; each progress report is a durable write pollers can see.
    4. Store the result tables, or a one-line error (the traceback goes to the log).
    """
    job = lab_job_get(job_id=job_id)
    if job is None:
        logger.warning("lab run %s: no such lab job", job_id)
        return
    if not jobstatus_start(job_id=job_id):
        logger.info("lab run %s: already finished or cancelled", job_id)
        return

    def report(fraction: float, label: str) -> None:
        percent = _MODEL_START + _MODEL_SPAN * max(0.0, min(1.0, fraction))
        jobstatus_progress(job_id=job_id, progress=percent, message=label)

    try:
        lab = lab_get(job.name)
        params = lab.validate(job.params if isinstance(job.params, dict) else {})
        jobstatus_progress(job_id=job_id, progress=_MODEL_START, message="starting")
        result = lab.run(params, progress=report)
    except LabError as error:
        jobstatus_fail(job_id=job_id, error=str(error))
        return
    except Exception as error:
        logger.exception("lab run %s (%s) crashed", job_id, job.name)
        jobstatus_fail(
            job_id=job_id,
            error=f"The lab stopped with an internal error ({type(error).__name__}).",
        )
        return
    jobstatus_finish(job_id=job_id, result=dict(result))
