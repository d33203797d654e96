"""What a report is: names, limits and reasons, its params and checkpoint, its loans.

The scope is fixed when the report is started (cut date ``as_of``, number of loans)
and stored in its params, so a resumed run counts the same loans the same way.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, TypedDict

from django.utils import timezone

from jobs.models import JobStatus
from jobs.resumable import JobRefused
from library.models import Loan

REPORT_KIND = "report"
REPORT_NAME = "monthly-loans"
REPORT_QUEUE = "default"
ALL_MONTHS = "all"
DEFAULT_CHUNK = 500
MAX_CHUNK = 50_000
MAX_PAUSE_MS = 10_000
# The lease outlives one chunk many times over; each checkpoint renews it.
LEASE_S = 60.0
# rq's own hard timeout (it kills the work-horse): well past any time limit.
RQ_TIMEOUT_S = 6 * 3600

REASON_USER = "cancelled by the user"
# REASON_OPERATOR (the admin's cancel) is generic JobStatus work: jobs.services.
REASON_SHUTDOWN = "worker shutdown"
REASON_TIME_LIMIT = "time limit"

CSV_COLUMNS = ["branch_id", "branch", "loans", "returned", "open", "days", "avg_days"]


class ReportError(JobRefused):
    """A report request that cannot be carried out; the message is safe to show."""


class BranchTotals(TypedDict):
    loans: int
    returned: int
    open: int
    days: int


class Checkpoint(TypedDict):
    last_id: int
    processed: int
    days: int
    branches: dict[str, BranchTotals]  # keyed by branch id as text (JSON keys)


class ReportParams(TypedDict):
    month: str  # "YYYY-MM" or "all"
    branch: int | None
    as_of: str  # ISO date: open loans count their days up to here
    total: int  # loans in scope when the report was started
    chunk: int
    time_limit_s: float | None
    pause_ms: int


Announce = Callable[[JobStatus, Checkpoint, float], None]


def previous_month(today: datetime.date) -> str:
    """Return "YYYY-MM" of the month before ``today``'s."""
    last_day = today.replace(day=1) - datetime.timedelta(days=1)
    return f"{last_day.year:04d}-{last_day.month:02d}"


def month_bounds(month: str) -> tuple[datetime.date, datetime.date]:
    """Return [first day, first day of the next month) of ``YYYY-MM``.

    Raise ReportError for anything else, and for a month whose end a date cannot
    hold: December 9999 ends in year 10000.
    """
    try:
        year_text, month_text = month.split("-")
        year, number = int(year_text), int(month_text)
        first = datetime.date(year, number, 1)
        after = datetime.date(year + number // 12, number % 12 + 1, 1)
    except (ValueError, OverflowError):
        raise ReportError(
            f"month must look like 2025-03 (up to 9999-11), got {month[:20]!r}"
        ) from None
    return first, after


def loans_in_scope(month: str, branch: int | None) -> Any:
    loans = Loan.objects.all()
    if month != ALL_MONTHS:
        first, after = month_bounds(month)
        loans = loans.filter(pickup_date__gte=first, pickup_date__lt=after)
    if branch is not None:
        loans = loans.filter(book__branch_id=branch)
    return loans


def empty_checkpoint() -> Checkpoint:
    return {"last_id": 0, "processed": 0, "days": 0, "branches": {}}


def checkpoint_of(job: JobStatus) -> Checkpoint:
    stored = job.checkpoint
    if not isinstance(stored, dict) or "last_id" not in stored:
        return empty_checkpoint()
    return {
        "last_id": int(stored["last_id"]),
        "processed": int(stored["processed"]),
        "days": int(stored["days"]),
        "branches": {
            str(key): {
                "loans": int(value["loans"]),
                "returned": int(value["returned"]),
                "open": int(value["open"]),
                "days": int(value["days"]),
            }
            for key, value in stored.get("branches", {}).items()
        },
    }


def params_of(job: JobStatus) -> ReportParams:
    stored = job.params if isinstance(job.params, dict) else {}
    branch = stored.get("branch")
    limit = stored.get("time_limit_s")
    return {
        "month": str(stored.get("month", ALL_MONTHS)),
        "branch": int(branch) if branch is not None else None,
        "as_of": str(stored.get("as_of", timezone.localdate().isoformat())),
        "total": int(stored.get("total", 0)),
        "chunk": max(1, min(MAX_CHUNK, int(stored.get("chunk", DEFAULT_CHUNK)))),
        "time_limit_s": float(limit) if limit is not None else None,
        "pause_ms": max(0, min(MAX_PAUSE_MS, int(stored.get("pause_ms", 0)))),
    }
