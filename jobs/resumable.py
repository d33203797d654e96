"""The JobStatus kinds that keep a checkpoint and may be resumed, and how.

jobs knows no such kind by name: the app that owns one registers it from its
``AppConfig.ready()`` (the monthly loan report: ``LibraryConfig.ready()``) with the
function that puts a row of that kind back in the queue. ``jobstatus_resumable``
(jobs.selectors) asks which kinds are registered; the admin's "Resume selected"
calls ``jobstatus_resume``.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from jobs.models import JobStatus


class JobRefused(Exception):
    """A job request (start, resume) that cannot be carried out; safe to show."""


class Resume(Protocol):
    """Enqueue a row of its kind again; raise JobRefused when it is not resumable."""

    def __call__(self, *, job_id: uuid.UUID) -> Any: ...


_resumers: dict[str, Resume] = {}


def resumable_kind_register(kind: str, resume: Resume) -> None:
    """Declare rows of ``kind`` resumable from their checkpoint through ``resume``."""
    _resumers[kind] = resume


def resumable_kinds() -> frozenset[str]:
    """Return the kinds registered as resumable."""
    return frozenset(_resumers)


def jobstatus_resume(*, job_id: uuid.UUID) -> Any:
    """Resume the row through its kind's function; raise JobRefused if it cannot be.

    A row of a kind nobody registered (or no row at all) is refused.
    """
    kind = JobStatus.objects.filter(pk=job_id).values_list("kind", flat=True).first()
    resume = _resumers.get(kind) if kind is not None else None
    if resume is None:
        raise JobRefused("no such resumable job")
    return resume(job_id=job_id)
