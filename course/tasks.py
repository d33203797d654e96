"""rq jobs of the course app. A job takes an id and calls one service."""

from __future__ import annotations

import uuid

from django.db import close_old_connections

from course.services import lab_run_execute


def run_lab(job_id: str) -> None:
    """Run the lab recorded in JobStatus ``job_id`` (queue "labs")."""
    # A worker outlives many jobs; never carry a stale connection into the next one.
    close_old_connections()
    try:
        lab_run_execute(job_id=uuid.UUID(job_id))
    finally:
        close_old_connections()
