"""Writes of the course app: queue a lab run, and carry one out in a worker."""

from __future__ import annotations

import logging
import uuid

import django_rq
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from course.labs.harness.base import Lab, LabError, NoLivePart, Params, Progress
from course.labs.harness.live import LIVE_PREFIX
from course.labs.registry import lab_get
from course.models import LabRun, LessonProgress
from course.sandbox import lab_run_sandboxed
from course.selectors import (
    LAB_JOB_KIND,
    LivePlace,
    lab_job_get,
    lab_runs_in_flight,
    live_run_place,
)
from jobs.backpressure import Admission, BoundedQueue
from jobs.models import JobStatus
from jobs.services import (
    jobstatus_create,
    jobstatus_fail,
    jobstatus_finish,
    jobstatus_progress,
    jobstatus_start,
    jobstatus_waiting_note,
)
from jobs.supervision import JOB_RETRY

logger = logging.getLogger(__name__)


class LabRunsInFlight(LabError):
    """The visitor already has as many runs waiting or running as one may."""


class LabQueueFull(LabError):
    """The bounded labs queue refused the run (backpressure); retry later."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


LAB_QUEUE = "labs"
# Live runs wait on a queue of their own: a worker takes model runs (milliseconds)
# before live runs (tens of seconds), and a live run's place in line is its index here.
LAB_LIVE_QUEUE = "labs-live"
# The rq entry point, named by its dotted path: course.tasks imports this module, and
# queued jobs and running workers name the task by this string.
RUN_LAB_TASK = "course.tasks.run_lab"
# Retry-After of a lab run refused because the bounded labs queue is full.
LAB_QUEUE_RETRY_AFTER_S = 5
# Progress below this share is the bookkeeping before the model starts.
_MODEL_START, _MODEL_SPAN = 5.0, 90.0
# With the live part: the model gets the first share, the live steps the rest.
_LIVE_MODEL_SPAN = 20.0
# Reserved key of JobStatus.params: the run includes the live part. Not a parameter
# name (those are identifiers), so it cannot collide; stripped before validation.
LIVE_KEY = "_live"
# Reserved key: the learner's prediction of the lesson's figure, kept with the run.
PREDICTION_KEY = "_prediction"


def lab_run_enqueue(
    *,
    lab: Lab,
    params: Params,
    user: AbstractBaseUser | AnonymousUser | None = None,
    live: bool = False,
    prediction: float | None = None,
    visitor: str = "",
) -> JobStatus:
    """Record a queued lab run and enqueue it on a bounded labs queue.

    ``visitor`` (``user:<id>`` or ``anon:<digest>``) owns the run: their runs are
    listed on the lesson page, and one visitor may have at most
    ``LAB_RUNS_PER_VISITOR`` runs waiting or running (``LabRunsInFlight``).

    The job is offered to Redis only after the row commits, so a worker never looks
    for a row that is not visible yet, and a rollback sends nothing. The queue is
    bounded (``jobs.backpressure``, drop_newest, ``LAB_QUEUE_CAPACITY`` waiting
    runs): a refused run is marked failed and ``LabQueueFull`` is raised.

    With ``live`` the run also measures the live system (it starts worker processes
    and writes rows); who may ask for that is the caller's decision.
    """

    if live and lab.live is None:
        raise NoLivePart(f"{lab.slug} has no live part yet")
    checked = lab.validate(params)
    stored: dict[str, object] = dict(checked)
    if live:
        stored[LIVE_KEY] = True
    if prediction is not None:
        stored[PREDICTION_KEY] = prediction
    admissions: list[Admission] = []

    def send() -> None:
        admissions.append(_lab_run_admit(job, live=live))
        if live:
            live_queue_announce()

    if visitor and lab_runs_in_flight(visitor=visitor) >= settings.LAB_RUNS_PER_VISITOR:
        # Counted before the insert: two posts racing may pass together, so the cap
        # can be exceeded by one at most; it bounds a visitor, it is not a quota.
        raise LabRunsInFlight(
            f"You already have {settings.LAB_RUNS_PER_VISITOR} runs waiting or"
            " running; let one finish, then run again."
        )
    with transaction.atomic():
        job = jobstatus_create(
            kind=LAB_JOB_KIND, name=lab.slug, params=stored, user=user
        )
        if visitor:
            LabRun.objects.create(job=job, slug=lab.slug, visitor=visitor, live=live)
        transaction.on_commit(send)
    if admissions and not admissions[0].accepted:
        raise LabQueueFull(
            "The lab queue is full; try again in a few seconds.",
            retry_after_s=LAB_QUEUE_RETRY_AFTER_S,
        )
    return job


def _lab_run_admit(job: JobStatus, *, live: bool) -> Admission:
    """Offer the run to its bounded queue; a refused run is marked failed.

    Runs after the commit (the row is visible to the worker), so the place taken
    is never one of a rolled-back run.
    """

    bounded = BoundedQueue(
        django_rq.get_queue(LAB_LIVE_QUEUE if live else LAB_QUEUE, commit_mode="auto"),
        capacity=settings.LAB_QUEUE_CAPACITY,
        policy="drop_newest",
    )
    # A run whose work-horse dies is tried again (jobs.supervision); the row is
    # claimed queued -> running, so a retry after a finished run does nothing.
    admission = bounded.enqueue(
        RUN_LAB_TASK,
        str(job.id),
        job_id=f"lab-{job.id}",
        description=f"lab {job.name}",
        retry=JOB_RETRY,
    )
    if not admission.accepted:
        logger.warning("lab run %s refused: the labs queue is full", job.id)
        jobstatus_fail(
            job_id=job.id, error="The lab queue was full; run the lab again shortly."
        )
    return admission


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

    stored = dict(job.params) if isinstance(job.params, dict) else {}
    live = stored.pop(LIVE_KEY, False) is True
    if live:
        live_queue_announce()  # one run left the line: the others moved up
    stored.pop(PREDICTION_KEY, None)
    report = _progress_reporter(job_id, live=live)

    try:
        lab = lab_get(job.name)
        params = lab.validate(stored)
        jobstatus_progress(job_id=job_id, progress=_MODEL_START, message="starting")
        result = lab_run_sandboxed(lab, params, live=live, progress=report)
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


def live_queue_announce() -> None:
    """Tell each queued live run its place in line, in its message.

    Live runs go one at a time (the ``labs-live`` queue); the message is what the
    lesson page shows while the run waits, and it changes only when the line moves:
    a live run queued or started.
    """
    queue_ids = django_rq.get_queue(LAB_LIVE_QUEUE).get_job_ids()
    for rq_id in queue_ids:
        try:
            job_id = uuid.UUID(rq_id.removeprefix("lab-"))
        except ValueError:
            continue
        job = lab_job_get(job_id=job_id)
        place = live_run_place(job=job, queue_ids=queue_ids) if job else None
        if place is not None:
            jobstatus_waiting_note(job_id=job_id, message=place_text(place))


def place_text(place: LivePlace) -> str:
    """Return the waiting message of a queued live run."""
    if place.ahead == 0:
        return "live runs go one at a time: yours is next"
    runs = "run" if place.ahead == 1 else "runs"
    wait = f", about {place.wait_s} s" if place.wait_s else ""
    return f"live runs go one at a time: {place.ahead} {runs} ahead of yours{wait}"


def _progress_reporter(job_id: uuid.UUID, *, live: bool) -> Progress:
    """Map a lab's progress reports to the row's percent.

    The model and the live part each report fractions from 0 to 1; a live run
    gives the model the first share and the live steps (labelled with the live
    prefix) the rest, so the bar never moves back.
    """

    in_live = False

    def report(fraction: float, label: str) -> None:
        nonlocal in_live
        share = max(0.0, min(1.0, fraction))
        if not live:
            percent = _MODEL_START + _MODEL_SPAN * share
        else:
            in_live = in_live or label.startswith(LIVE_PREFIX)
            if label == "done":
                percent = _MODEL_START + _MODEL_SPAN
            elif in_live:
                live_span = _MODEL_SPAN - _LIVE_MODEL_SPAN
                percent = _MODEL_START + _LIVE_MODEL_SPAN + live_span * share
            else:
                percent = _MODEL_START + _LIVE_MODEL_SPAN * share
        jobstatus_progress(job_id=job_id, progress=percent, message=label)

    return report


# --- a learner's progress ------------------------------------------------------------


def _progress_row(*, user_id: int, slug: str) -> LessonProgress:
    """Return the learner's row for ``slug``, locked; call inside ``atomic()``."""
    LessonProgress.objects.get_or_create(user_id=user_id, slug=slug)
    return LessonProgress.objects.select_for_update().get(user_id=user_id, slug=slug)


def progress_mark_read(*, user_id: int, slug: str) -> LessonProgress:
    """Record that the learner has read the lesson (the first time counts)."""
    with transaction.atomic():
        row = _progress_row(user_id=user_id, slug=slug)
        if row.read_at is None:
            row.read_at = timezone.now()
            row.save(update_fields=["read_at", "updated_at"])
    return row


def progress_answer(*, user_id: int, slug: str, question: int) -> LessonProgress:
    """Record that the learner opened the answer to ``question`` (0-based, once)."""
    with transaction.atomic():
        row = _progress_row(user_id=user_id, slug=slug)
        answered = [n for n in row.answered if isinstance(n, int)]
        if question not in answered:
            row.answered = sorted([*answered, question])
            row.save(update_fields=["answered", "updated_at"])
    return row


def progress_lab_run(*, user_id: int, slug: str) -> None:
    """Count one lab run the learner started for the lesson."""
    with transaction.atomic():
        _progress_row(user_id=user_id, slug=slug)
        LessonProgress.objects.filter(user_id=user_id, slug=slug).update(
            lab_runs=F("lab_runs") + 1, updated_at=timezone.now()
        )
