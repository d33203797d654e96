"""Whose lab runs a request may read: the run's owner, or whoever holds its share link.

Anonymous visitors run labs too, so a run's owner is not always a user: it is the
visitor recorded on its ``LabRun`` row (``user:<id>``, or ``anon:<digest>`` of a
token kept in the session, ``course.visitors``). A learner may share one run on
purpose: its share link carries a signature of the run's id (``share_token``), which
lets anyone holding the link read that run and nothing else.

``CourseConfig.ready()`` registers ``lab_run_readable`` with ``jobs.access``, so the
status poll, the long poll and the event stream (in jobs and realtime, which never
import the course) answer the same rule the course's own pages apply.
"""

from __future__ import annotations

import uuid

from django.core import signing
from django.http import HttpRequest

from course.models import LabRun
from course.visitors import visitor_of
from jobs.models import JobStatus

_SHARE_SALT = "course.lab-run-share"
SHARE_PARAM = "share"


def share_token(job_id: uuid.UUID) -> str:
    """Return the token of a run's share link (a signature of its id)."""
    return signing.Signer(salt=_SHARE_SALT).sign(str(job_id)).split(":", 1)[1]


def _shared(job_id: uuid.UUID, request: HttpRequest) -> bool:
    token = request.GET.get(SHARE_PARAM, "")
    if not token:
        return False
    try:
        signing.Signer(salt=_SHARE_SALT).unsign(f"{job_id}:{token}")
    except signing.BadSignature:
        return False
    return True


def lab_run_owned(job: JobStatus, request: HttpRequest) -> bool:
    """Return whether the run was made from this request's browser or account."""
    visitor = visitor_of(request)
    return (
        bool(visitor) and LabRun.objects.filter(job_id=job.pk, visitor=visitor).exists()
    )


def lab_run_readable(job: JobStatus, request: HttpRequest) -> bool:
    """Let the run's owner, or a holder of its share link, read it."""
    return _shared(job.pk, request) or lab_run_owned(job, request)
