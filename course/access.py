"""Whose lab runs a request may read: the rule course registers for "lab" jobs.

Anonymous visitors run labs too, so a run's owner is not always a user: it is the
visitor recorded on its ``LabRun`` row (``user:<id>``, or ``anon:<digest>`` of the
session key). ``CourseConfig.ready()`` registers ``lab_run_readable`` with
``jobs.access``, so the status poll, the long poll and the event stream (in jobs and
realtime, which never import the course) answer a run to its visitor alone.
"""

from __future__ import annotations

import hashlib

from django.http import HttpRequest

from course.models import LabRun
from jobs.models import JobStatus


def request_visitor(request: HttpRequest) -> str:
    """Return who owns the runs made from this request's browser ("" if nobody).

    The same owner ``course.views`` records on a run: ``user:<id>`` for a signed-in
    learner, else a digest of the session key (never the key, a credential); a
    request without a session owns no run.
    """
    user = request.user
    if user.is_authenticated:
        return f"user:{user.pk}"
    key = request.session.session_key
    if key is None:
        return ""
    return "anon:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def lab_run_readable(job: JobStatus, request: HttpRequest) -> bool:
    """Let the visitor who ran the lab read its status (``jobs.access`` rule)."""
    visitor = request_visitor(request)
    if not visitor:
        return False
    return LabRun.objects.filter(job_id=job.pk, visitor=visitor).exists()
