"""Job status for pollers: short polling with a version number."""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from jobs.models import JobStatus
from jobs.selectors import jobstatus_changed_since, jobstatus_payload


def no_store(response: HttpResponse) -> HttpResponse:
    """Mark ``response`` uncacheable: it describes one moment of a job."""
    # Every answer describes one moment; a cached copy would hide progress.
    response["Cache-Control"] = "no-store"
    return response


@require_GET
def jobstatus_status(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    """Return 204 while ``?version=`` is current, else the job as JSON.

    Without ``version`` the job is always returned. Job ids are random UUIDs handed
    only to whoever started the job, which is what keeps other people's jobs private.
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
    try:
        job = jobstatus_changed_since(job_id=job_id, version=version)
    except JobStatus.DoesNotExist:
        return no_store(JsonResponse({"error": "no such job"}, status=404))
    if job is None:
        return no_store(HttpResponse(status=204))
    return no_store(JsonResponse(jobstatus_payload(job)))
