"""rq jobs of the course app. A job takes an id and calls one service."""

from __future__ import annotations

import uuid

from django.db import close_old_connections, connection

from course.services import lab_run_execute


def _drop_stale_connections() -> None:
    # A worker outlives many jobs; never carry a stale connection into the next one.
    # Inside an atomic block (a test running the job in-process) closing would doom
    # the surrounding transaction, and nothing there can be stale.
    if not connection.in_atomic_block:
        close_old_connections()


def run_lab(job_id: str) -> None:
    """Run the lab recorded in JobStatus ``job_id`` (queue "labs")."""
    _drop_stale_connections()
    try:
        lab_run_execute(job_id=uuid.UUID(job_id))
    finally:
        _drop_stale_connections()
