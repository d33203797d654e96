"""Reads of JobStatus."""

from __future__ import annotations

import uuid
from typing import Any

from jobs.models import JobStatus


def jobstatus_payload(job: JobStatus) -> dict[str, Any]:
    """Return the JSON shape that status pages and pollers read."""
    return {
        "id": str(job.id),
        "kind": job.kind,
        "name": job.name,
        "state": job.state,
        "progress": round(job.progress, 1),
        "message": job.message,
        "version": job.version,
        "finished": job.is_finished,
        "result": job.result,
        "error": job.error,
        "params": job.params,
    }


def jobstatus_changed_since(*, job_id: uuid.UUID, version: int) -> JobStatus | None:
    """Return the job when its version differs from ``version``, else None.

    Raises JobStatus.DoesNotExist for an unknown id.
    """
    job = JobStatus.objects.get(pk=job_id)
    return None if job.version == version else job
