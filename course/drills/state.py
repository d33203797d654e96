"""A drill's record: a ``JobStatus`` of kind ``drill``, and what its fields mean.

No table of its own: a drill is a job like a lab run, with a state, a message, a
lease held by its supervisor, a result and its starter (``created_by``). Two sides
write it, each its own fields:

- the web side (the learner's drill page, ``course.drills.services``) writes the
  requests, under a lock on the row: ``checkpoint`` = ``{"touched": t, "check": t,
  "pass": digest}`` (when the page last asked after the drill, when a check was
  last asked for, the digest of the newest sign-in token) and, to stop,
  ``cancel_requested_at``;
- the supervisor (``course.drills.supervisor``), holding the lease, writes the
  rest: state, message, progress and ``result`` = ``{"phase", "port", "sandbox",
  "supervisor": {"pid", "start"}, "signin" (the digest of the sign-in the sandbox
  holds), "verdict", "check_for" (the request it answers), "checked_at",
  "checking", "passed_ever"}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from jobs.models import JobStatus

DRILL_KIND: Final = "drill"
# The operator account each drill's sandbox gets.
OPERATOR: Final = "drill-operator"


class Phase(StrEnum):
    STARTING = "starting"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(frozen=True)
class Requests:
    touched_at: float
    check_at: float
    pass_digest: str


def drill_requests(job: JobStatus) -> Requests:
    """Return what the learner's page asked for (the row's ``checkpoint``)."""
    raw = job.checkpoint if isinstance(job.checkpoint, dict) else {}
    created = job.created_at.timestamp() if job.created_at else 0.0
    return Requests(
        touched_at=_number(raw.get("touched"), created),
        check_at=_number(raw.get("check"), 0.0),
        pass_digest=str(raw.get("pass") or ""),
    )


def drill_result(job: JobStatus) -> dict[str, Any]:
    return dict(job.result) if isinstance(job.result, dict) else {}


def _number(value: object, default: float) -> float:
    return float(value) if isinstance(value, int | float) else default


def process_start(pid: int) -> str | None:
    """Return the process's start time, to tell it from a later one with its pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
