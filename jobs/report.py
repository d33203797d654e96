"""The monthly loan report: a long job in chunks, with checkpoint, cancel and resume.

Scope. A report covers the loans picked up in one calendar month (``month``,
"YYYY-MM"), or every loan (``month="all"``), optionally of one branch. Called with no
month (the monthly scheduler calls ``jobs.report.monthly_report_start`` by dotted
path, without arguments), it reports the month that just ended. A loan counts the
days it was out up to the report's cut date ``as_of``: its return date, or the cut
date while it is still open. The cut date (the first day after the month, or today
if that is earlier; today for "all") and the number of loans in scope are fixed
when the report is started and stored in its params, so a resumed run counts the
same loans the same way.

The run (``report_run``, an rq job on the ``default`` queue), as in the lesson:

1. Claim the JobStatus row: take its lease (queued, or running with a lease that
   ran out), or do nothing (a second delivery, a cancelled row).
2. Start from the row's checkpoint (last loan id, running totals), or from zero.
3. At every chunk boundary read the cancellation sources: a cancel request on the
   row (the page's Cancel button, the admin's "Cancel selected"), the time limit,
   worker shutdown (SIGTERM to this work-horse, or a warm shutdown of its rq worker
   recorded in Redis) and the lease (another owner holds the row). A cancel stops
   at the last checkpoint and marks the row cancelled with its reason; a lost lease
   stops without writing anything.
4. Read the next chunk by id (keyset: ``id > last_id``), fold it into the totals,
   and write checkpoint, progress and the renewed lease in one owner-checked UPDATE,
   *then* announce the progress (rq job meta, log). A crash between the two leaves
   the progress saved but unannounced, never announced but unsaved.
5. When no loan is left, store the result (per-branch rows) and mark the row done.

A chunk is counted in the same statement that moves ``last_id`` past it, so a
resumed run never counts a loan twice and never skips one.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypedDict

import django_rq
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone
from rq import get_current_job
from rq.worker import Worker

from jobs.models import JobStatus
from jobs.services import (
    CancelOutcome,
    jobstatus_cancel_request,
    jobstatus_checkpoint,
    jobstatus_claim,
    jobstatus_complete,
    jobstatus_create,
    jobstatus_requeue,
    jobstatus_stop,
)
from library.models import Branch, Loan

logger = logging.getLogger(__name__)

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
REASON_OPERATOR = "cancelled by an operator"
REASON_SHUTDOWN = "worker shutdown"
REASON_TIME_LIMIT = "time limit"

CSV_COLUMNS = ["branch_id", "branch", "loans", "returned", "open", "days", "avg_days"]


class ReportError(Exception):
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


# --- starting, cancelling, resuming ---------------------------------------------------


def previous_month(today: datetime.date) -> str:
    """Return "YYYY-MM" of the month before ``today``'s."""
    last_day = today.replace(day=1) - datetime.timedelta(days=1)
    return f"{last_day.year:04d}-{last_day.month:02d}"


def _month_bounds(month: str) -> tuple[datetime.date, datetime.date]:
    try:
        year_text, month_text = month.split("-")
        first = datetime.date(int(year_text), int(month_text), 1)
    except ValueError:
        raise ReportError(f"month must look like 2025-03, got {month[:20]!r}") from None
    after = (first + datetime.timedelta(days=32)).replace(day=1)
    return first, after


def _scope(month: str, branch: int | None) -> Any:
    loans = Loan.objects.all()
    if month != ALL_MONTHS:
        first, after = _month_bounds(month)
        loans = loans.filter(pickup_date__gte=first, pickup_date__lt=after)
    if branch is not None:
        loans = loans.filter(book__branch_id=branch)
    return loans


def _enqueue(job: JobStatus, queue: Any) -> None:
    target = queue if queue is not None else django_rq.get_queue(REPORT_QUEUE)
    # A fresh rq id per attempt: a resumed report is a new delivery of the same row.
    target.enqueue(
        report_run,
        str(job.id),
        job_id=f"report-{job.id}-{uuid.uuid4().hex[:6]}",
        description=f"{REPORT_NAME} {job.params.get('month', '')}",
        job_timeout=RQ_TIMEOUT_S,
        result_ttl=3600,
        failure_ttl=24 * 3600,
    )


def monthly_report_start(
    *,
    user: AbstractBaseUser | AnonymousUser | None = None,
    month: str | None = None,
    branch: int | None = None,
    chunk: int = DEFAULT_CHUNK,
    time_limit_s: float | None = None,
    pause_ms: int = 0,
    queue: Any = None,
) -> JobStatus:
    """Record a monthly loan report and enqueue it; return its JobStatus row.

    ``month`` is "YYYY-MM", "all", or None for the month before today (what the
    monthly scheduler wants). ``pause_ms`` waits after each chunk, so a short report
    can be followed (and cancelled) by eye; ``queue`` is an rq Queue to use instead
    of ``default`` (the live lab's private queue). Raises ReportError.
    """
    today = timezone.localdate()
    month = previous_month(today) if month is None else month.strip()
    # Open loans count their days up to the month's end (or today, if sooner).
    as_of = today if month == ALL_MONTHS else min(_month_bounds(month)[1], today)
    if not 1 <= chunk <= MAX_CHUNK:
        raise ReportError(f"chunk must be between 1 and {MAX_CHUNK}")
    if time_limit_s is not None and time_limit_s <= 0:
        raise ReportError("the time limit must be more than 0 seconds")
    if not 0 <= pause_ms <= MAX_PAUSE_MS:
        raise ReportError(f"the pause must be between 0 and {MAX_PAUSE_MS} ms")
    if branch is not None and not Branch.objects.filter(pk=branch).exists():
        raise ReportError(f"there is no branch {branch}")
    params: ReportParams = {
        "month": month,
        "branch": branch,
        "as_of": as_of.isoformat(),
        "total": _scope(month, branch).count(),
        "chunk": chunk,
        "time_limit_s": time_limit_s,
        "pause_ms": pause_ms,
    }
    with transaction.atomic():
        job = jobstatus_create(
            kind=REPORT_KIND, name=REPORT_NAME, params=dict(params), user=user
        )
        _enqueue(job, queue)  # sent after commit (COMMIT_MODE "on_db_commit")
    return job


def report_cancel(*, job_id: uuid.UUID, reason: str) -> CancelOutcome:
    """Ask a report to stop (page button, admin action): jobstatus_cancel_request."""
    return jobstatus_cancel_request(job_id=job_id, reason=reason)


def report_resume(*, job_id: uuid.UUID, queue: Any = None) -> JobStatus:
    """Enqueue a cancelled (or abandoned) report again; it continues at its checkpoint.

    Raises ReportError when the report is not resumable.
    """
    with transaction.atomic():
        job = JobStatus.objects.filter(pk=job_id, kind=REPORT_KIND).first()
        if job is None:
            raise ReportError("no such report")
        processed = _checkpoint_of(job)["processed"]
        total = int(job.params.get("total", 0))
        if not jobstatus_requeue(
            job_id=job_id,
            kind=REPORT_KIND,
            message=f"resuming at {processed:,} of {total:,} loans",
        ):
            raise ReportError(f"a {job.state} report cannot be resumed")
        job.refresh_from_db()
        _enqueue(job, queue)
    return job


# --- the run --------------------------------------------------------------------------


def _empty_checkpoint() -> Checkpoint:
    return {"last_id": 0, "processed": 0, "days": 0, "branches": {}}


def _checkpoint_of(job: JobStatus) -> Checkpoint:
    stored = job.checkpoint
    if not isinstance(stored, dict) or "last_id" not in stored:
        return _empty_checkpoint()
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


def _params_of(job: JobStatus) -> ReportParams:
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


def _fold(
    checkpoint: Checkpoint,
    rows: list[tuple[int, int, datetime.date, datetime.date | None]],
    as_of: datetime.date,
) -> Checkpoint:
    """Return the checkpoint advanced past ``rows`` (the input is left untouched)."""
    branches = {
        key: BranchTotals(**value) for key, value in checkpoint["branches"].items()
    }
    days_total = checkpoint["days"]
    for _loan_id, branch_id, pickup, returned in rows:
        open_at_cut = returned is None or returned > as_of
        end = as_of if open_at_cut or returned is None else returned
        days = max(0, (end - pickup).days)
        totals = branches.setdefault(
            str(branch_id), {"loans": 0, "returned": 0, "open": 0, "days": 0}
        )
        totals["loans"] += 1
        totals["open" if open_at_cut else "returned"] += 1
        totals["days"] += days
        days_total += days
    return {
        "last_id": rows[-1][0] if rows else checkpoint["last_id"],
        "processed": checkpoint["processed"] + len(rows),
        "days": days_total,
        "branches": branches,
    }


def _percent(processed: int, total: int) -> float:
    return 100.0 * processed / max(total, processed, 1)


def _result(params: ReportParams, checkpoint: Checkpoint) -> dict[str, Any]:
    names = dict(
        Branch.objects.filter(
            pk__in=[int(k) for k in checkpoint["branches"]]
        ).values_list("pk", "name")
    )
    processed = checkpoint["processed"]
    return {
        "month": params["month"],
        "branch": params["branch"],
        "as_of": params["as_of"],
        "processed": processed,
        "days": checkpoint["days"],
        "average_days": round(checkpoint["days"] / processed, 2) if processed else None,
        "branches": [
            {"branch_id": int(key), "branch": names.get(int(key), ""), **totals}
            for key, totals in sorted(
                checkpoint["branches"].items(), key=lambda item: int(item[0])
            )
        ],
    }


class _ShutdownFlag:
    """SIGTERM sets a flag the run reads at its next chunk boundary.

    rq's work-horse leaves SIGTERM at its default (die at once); a deploy that
    signals the whole service reaches the horse too. The previous handler is
    chained (a SimpleWorker's own warm shutdown) and restored when the run ends.
    Only the main thread may install handlers; elsewhere the flag stays unset.
    """

    def __init__(self) -> None:
        self.set = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.set = True
        if callable(self._previous):
            self._previous(signum, frame)

    def __enter__(self) -> _ShutdownFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)


def _worker_shutting_down() -> bool:
    """Return whether the rq worker running this job received a warm shutdown."""
    rq_job = get_current_job()
    name = os.environ.get("RQ_WORKER_ID")
    if rq_job is None or not name:
        return False
    # rq records a warm shutdown (SIGTERM to the worker while busy) in its hash.
    key = Worker.redis_worker_namespace_prefix + name
    return bool(rq_job.connection.hexists(key, "shutdown_requested_date"))


def _announce_rq(job: JobStatus, checkpoint: Checkpoint, progress: float) -> None:
    """Announce progress after it is stored: rq's job meta and the log."""
    rq_job = get_current_job()
    if rq_job is not None:
        rq_job.meta["progress"] = round(progress, 1)
        rq_job.meta["processed"] = checkpoint["processed"]
        rq_job.save_meta()  # type: ignore[no-untyped-call]
    logger.info(
        "report %s: %.0f%% (%d loans)", job.pk, progress, checkpoint["processed"]
    )


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _stop_reason(
    job_id: uuid.UUID,
    owner: str,
    shutdown: _ShutdownFlag,
    started: float,
    time_limit_s: float | None,
) -> tuple[str, bool]:
    """Return (reason, keep_lease): why the run must stop now, or ("", True).

    ``keep_lease`` is False when the run no longer owns its row: it must not write.
    """
    row = (
        JobStatus.objects.filter(pk=job_id)
        .values("state", "lease_owner", "cancel_requested_at", "cancel_reason")
        .first()
    )
    if row is None or row["lease_owner"] != owner or row["state"] != "running":
        return "lease lost", False
    if row["cancel_requested_at"] is not None:
        return row["cancel_reason"] or REASON_USER, True
    if shutdown.set or _worker_shutting_down():
        return REASON_SHUTDOWN, True
    if time_limit_s is not None and time.monotonic() - started >= time_limit_s:
        return f"{REASON_TIME_LIMIT} ({time_limit_s:g} s)", True
    return "", True


def report_execute(
    *,
    job_id: uuid.UUID,
    owner: str | None = None,
    announce: Announce = _announce_rq,
    lease_s: float = LEASE_S,
) -> str:
    """Run (or continue) the report; return how it ended.

    The end is the row's new state ("done", "cancelled"), "lost" when the lease went
    to another owner, or "skipped" when the row could not be claimed.
    """
    owner = owner or _owner()
    job = jobstatus_claim(job_id=job_id, owner=owner, lease_s=lease_s)
    if job is None:
        logger.info("report %s: not claimable (finished, cancelled or leased)", job_id)
        return "skipped"
    params = _params_of(job)
    as_of = datetime.date.fromisoformat(params["as_of"])
    checkpoint = _checkpoint_of(job)
    scope = _scope(params["month"], params["branch"]).order_by("id")
    started = time.monotonic()
    with _ShutdownFlag() as shutdown:
        while True:
            reason, owned = _stop_reason(
                job_id, owner, shutdown, started, params["time_limit_s"]
            )
            if not owned:
                logger.warning("report %s: lease lost; stopping unwritten", job_id)
                return "lost"
            if reason:
                jobstatus_stop(job_id=job_id, owner=owner, reason=reason)
                return JobStatus.State.CANCELLED
            # One row more than the chunk tells whether this chunk is the last.
            rows = list(
                scope.filter(id__gt=checkpoint["last_id"]).values_list(
                    "id", "book__branch_id", "pickup_date", "return_date"
                )[: params["chunk"] + 1]
            )
            more = len(rows) > params["chunk"]
            checkpoint = _fold(checkpoint, rows[: params["chunk"]], as_of)
            if not more:
                if not jobstatus_complete(
                    job_id=job_id,
                    owner=owner,
                    checkpoint=dict(checkpoint),
                    result=_result(params, checkpoint),
                ):
                    logger.warning("report %s: lease lost at the end", job_id)
                    return "lost"
                return JobStatus.State.DONE
            progress = _percent(checkpoint["processed"], params["total"])
            if not jobstatus_checkpoint(
                job_id=job_id,
                owner=owner,
                checkpoint=dict(checkpoint),
                progress=progress,
                message=f"{checkpoint['processed']:,} of {params['total']:,} loans",
                lease_s=lease_s,
            ):
                logger.warning("report %s: lease lost; chunk not written", job_id)
                return "lost"
            announce(job, checkpoint, progress)  # stored first, announced second
            if params["pause_ms"]:
                time.sleep(params["pause_ms"] / 1000)


def report_run(job_id: str) -> str:
    """rq entry point: run the report of this JobStatus id."""
    return report_execute(job_id=uuid.UUID(job_id))


# --- the finished report as CSV -----------------------------------------------------


def report_csv_rows(job: JobStatus) -> Iterator[list[str | int | float]]:
    """Yield the CSV rows of a finished report: a header, one row per branch, total."""
    result = job.result if isinstance(job.result, dict) else {}
    yield list(CSV_COLUMNS)
    totals = {"loans": 0, "returned": 0, "open": 0, "days": 0}
    for row in result.get("branches", []):
        for key in totals:
            totals[key] += int(row[key])
        yield [
            int(row["branch_id"]),
            str(row["branch"]),
            int(row["loans"]),
            int(row["returned"]),
            int(row["open"]),
            int(row["days"]),
            round(int(row["days"]) / int(row["loans"]), 2) if row["loans"] else "",
        ]
    average = round(totals["days"] / totals["loans"], 2) if totals["loans"] else ""
    yield [
        "",
        "total",
        totals["loans"],
        totals["returned"],
        totals["open"],
        totals["days"],
        average,
    ]


def report_filename(job: JobStatus) -> str:
    month = str(job.params.get("month", ALL_MONTHS)) if job.params else ALL_MONTHS
    return f"loan-report-{month}-{str(job.pk)[:8]}.csv"
