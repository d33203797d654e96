"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import datetime
import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connection, transaction

from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    table,
)
from course.labs.harness.jsnum import js_round
from course.labs.long_running_jobs.params import LongRunningJobsParams
from jobs.models import JobStatus
from library import report
from library.models import Book, Branch, Loan, Member

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem

from course.labs.long_running_jobs.model import (
    DAYS_CYCLE,
    LIVE_MAX_RECORDS,
    LIVE_MIN_CHUNKS,
    LIVE_PAUSE_MS,
    LIVE_TIMEOUT_S,
    average,
)

LIVE_COLUMNS = ["run", "processed", "total", "status", "average_days"]


def live_check(params: LongRunningJobsParams) -> str | None:
    """Refuse more loans than the live run writes, or too few chunks to cancel."""
    if params.records > LIVE_MAX_RECORDS:
        return (
            f"live: at most {LIVE_MAX_RECORDS} loans are written for the live "
            f"report, got records={params.records}"
        )
    if math.ceil(params.records / params.chunk) < LIVE_MIN_CHUNKS:
        return (
            f"live: records / chunk gives fewer than {LIVE_MIN_CHUNKS} chunks; "
            "nothing could be cancelled half-way"
        )
    return None


@dataclass(frozen=True)
class Report:
    """One report run as its JobStatus row ended: the checkpoint's counts, state."""

    run: str
    processed: int
    days: int
    state: str


@dataclass(frozen=True)
class Measurement:
    reports: list[Report]


def measure(params: LongRunningJobsParams, progress: Progress) -> Measurement:
    """Cancel a real report at the threshold, resume it, compare with a clean run.

    1. Start one real rq worker process on a private queue (``live_system``).
    2. Write ``records`` loans of a temporary branch: loan ``i`` out ``i % 30`` days.
    3. Start the report; once its row shows ``cancel_at_pct`` percent (after at
       least one chunk, as the lesson's callback), cancel it the way the page's
       Cancel button does, and wait until it stops at a chunk boundary.
    4. Resume it the way the Resume button does; wait until it is done.
    5. Run the same report without interruption and compare.
    6. However it ends: delete the loans, the branch and the lab's report rows.
    """
    if connection.in_atomic_block:
        raise LabError("live: run the live part outside a database transaction")
    run = harness.new_run_id()
    scope = _LiveScope(run)
    try:
        scope.create(params.records)
        with harness.live_system(
            run=run, progress=progress, workers=1, private_queue=True
        ) as system:
            reports = _live_runs(
                system, scope, params.chunk, params.cancel_at_pct, progress
            )
    finally:
        scope.delete()
    return Measurement(reports)


def tables(params: LongRunningJobsParams, measured: Measurement) -> Tables:
    """Each run's counts; the average loan length once a run has seen them all."""
    rows: list[list[Cell]] = [
        [
            found.run,
            found.processed,
            found.days,
            found.state,
            None if found.run == "cancelled" else average(found.days, params.records),
        ]
        for found in measured.reports
    ]
    return {"live_cancel_resume": table(LIVE_COLUMNS, rows)}


class _LiveScope:
    """The live part's throwaway branch, book, member and loans."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.branch_id: int | None = None
        self.job_ids: list[uuid.UUID] = []

    def create(self, records: int) -> None:
        pickup = datetime.date(2000, 1, 3)
        with transaction.atomic():
            branch = Branch.objects.create(
                name=f"Lab run {self.run}", city="(temporary)"
            )
            self.branch_id = branch.pk
            book = Book.objects.create(
                title=f"Lab book {self.run}", author="lab", branch=branch
            )
            member = Member.objects.create(
                first_name="Lab", last_name=self.run, registered_at=pickup
            )
            Loan.objects.bulk_create(
                [
                    Loan(
                        book=book,
                        member=member,
                        pickup_date=pickup,
                        return_date=pickup + datetime.timedelta(days=i % DAYS_CYCLE),
                    )
                    for i in range(1, records + 1)
                ],
                batch_size=2000,
            )

    def delete(self) -> None:
        if self.branch_id is None:
            return
        with transaction.atomic():
            JobStatus.objects.filter(pk__in=self.job_ids).delete()
            loans = Loan.objects.filter(book__branch_id=self.branch_id)
            member_ids = set(loans.values_list("member_id", flat=True))
            loans.delete()
            Book.objects.filter(branch_id=self.branch_id).delete()
            Member.objects.filter(pk__in=member_ids, last_name=self.run).delete()
            Branch.objects.filter(pk=self.branch_id).delete()


def _live_runs(
    system: LiveSystem,
    scope: _LiveScope,
    chunk: int,
    cancel_at: int,
    progress: Progress,
) -> list[Report]:

    def row_of(job_id: uuid.UUID) -> JobStatus:
        return JobStatus.objects.get(pk=job_id)

    def wait_finished(job_id: uuid.UUID, what: str) -> JobStatus:
        harness.wait_until(
            lambda: row_of(job_id).is_finished,
            what=what,
            timeout=LIVE_TIMEOUT_S,
            system=system,
            detail=lambda: row_of(job_id).message,
        )
        return row_of(job_id)

    def counts(job: JobStatus) -> tuple[int, int]:
        checkpoint = job.checkpoint if isinstance(job.checkpoint, dict) else {}
        return int(checkpoint.get("processed", 0)), int(checkpoint.get("days", 0))

    def reached(job_id: uuid.UUID) -> bool:
        job = row_of(job_id)
        processed, _ = counts(job)
        shown = js_round(job.progress)
        return job.is_finished or (processed > 0 and shown >= cancel_at)

    harness.live_step(progress, 0.1, "report started on a real rq worker")
    job = report.monthly_report_start(
        month=report.ALL_MONTHS,
        branch=scope.branch_id,
        chunk=chunk,
        pause_ms=LIVE_PAUSE_MS,
        queue=system.private_queue,
    )
    scope.job_ids.append(job.pk)
    harness.wait_until(
        lambda: reached(job.pk),
        what=f"the report reaching {cancel_at} %",
        timeout=LIVE_TIMEOUT_S,
        system=system,
    )
    harness.live_step(progress, 0.35, f"cancel at {cancel_at} % (the page's path)")
    report.report_cancel(job_id=job.pk, reason=report.REASON_USER)
    stopped = wait_finished(job.pk, "the cancelled report")
    reports = [Report("cancelled", *counts(stopped), stopped.state)]

    if stopped.state == JobStatus.State.CANCELLED:
        harness.live_step(progress, 0.5, "resume from the checkpoint")
        report.report_resume(job_id=job.pk, queue=system.private_queue)
    resumed = wait_finished(job.pk, "the resumed report")
    reports.append(Report("resumed", *counts(resumed), resumed.state))

    harness.live_step(progress, 0.75, "the same report, uninterrupted")
    clean = report.monthly_report_start(
        month=report.ALL_MONTHS,
        branch=scope.branch_id,
        chunk=chunk,
        queue=system.private_queue,
    )
    scope.job_ids.append(clean.pk)
    finished = wait_finished(clean.pk, "the uninterrupted report")
    reports.append(Report("uninterrupted", *counts(finished), finished.state))
    return reports


LIVE = LivePart(check=live_check, measure=measure, tables=tables)
