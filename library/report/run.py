"""The run: claim the row, fold chunk after chunk into the checkpoint, finish."""

from __future__ import annotations

import datetime
import logging
import os
import socket
import time
import uuid
from typing import Any

from rq import get_current_job

from jobs.models import JobStatus
from jobs.services import (
    jobstatus_checkpoint,
    jobstatus_claim,
    jobstatus_complete,
    jobstatus_stop,
)
from library.models import Branch
from library.report.cancellation import ShutdownFlag, stop_reason
from library.report.scope import (
    LEASE_S,
    Announce,
    BranchTotals,
    Checkpoint,
    ReportParams,
    checkpoint_of,
    loans_in_scope,
    params_of,
)

logger = logging.getLogger(__name__)


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
    params = params_of(job)
    as_of = datetime.date.fromisoformat(params["as_of"])
    checkpoint = checkpoint_of(job)
    scope = loans_in_scope(params["month"], params["branch"]).order_by("id")
    started = time.monotonic()
    with ShutdownFlag() as shutdown:
        while True:
            reason, owned = stop_reason(
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
