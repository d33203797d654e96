"""Job status for pollers: short polling with a version number."""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from jobs.access import jobstatus_readable
from jobs.selectors import jobstatus_get, jobstatus_payload


def no_store(response: HttpResponse) -> HttpResponse:
    """Mark ``response`` uncacheable: it describes one moment of a job."""
    # Every answer describes one moment; a cached copy would hide progress.
    response["Cache-Control"] = "no-store"
    return response


@require_GET
def jobstatus_status(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    """Return 204 while ``?version=`` is current, else the job as JSON.

    Without ``version`` the job is always returned. A job the request may not read
    (``jobs.access``) is answered as one that does not exist: 404.
    """
    raw = request.GET.get("version")
    version = -1  # versions start at 1, so -1 always differs
    if raw is not None:
        try:
            version = int(raw)
        except ValueError:
            return no_store(
                JsonResponse(
                    {"error": "version must be a whole number", "version": raw[:40]},
                    status=400,
                )
            )
    job = jobstatus_get(job_id=job_id)
    if job is None or not jobstatus_readable(job, request):
        return no_store(JsonResponse({"error": "no such job"}, status=404))
    if job.version == version:
        return no_store(HttpResponse(status=204))
    return no_store(JsonResponse(jobstatus_payload(job)))
