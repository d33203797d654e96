"""Lab for "Long-Running Jobs": chunks, a durable checkpoint, cancel and resume.

Model part, the lesson's experiment:

- ``records`` loans, loan ``i`` (1-based) out for ``i % 30`` days;
- the report adds up the days chunk by chunk (``chunk`` loans per round, taken by
  offset ``processed``, which advances by whole chunks as in the lesson's loop and
  may overshoot ``records`` on the last one), writes ``processed`` and the running
  total to the status record, *then* reports the percent (``Math.round``);
- the progress callback raises the cancel signal once the percent reaches
  ``cancel_at_pct``; the loop reads it at the top of the next round, so a signal
  raised on the last chunk is never seen and the run completes (status ``done``);
- a second run starts from the stored ``processed`` and total and completes.

Tables: ``cancelled`` (processed, total, status of the first run), ``resumed``
(processed, total, average_days = total / records, ``toFixed(2)``) and ``chunking``
(for chunk sizes 100, 500, 3000, 10000: ``ceil(records / chunk)`` progress writes and
a worst-case cancel delay of one chunk).

Live part: the real monthly loan report (``jobs.report``) on a real rq worker
process, over ``records`` loans of a throwaway branch (loan ``i`` out ``i % 30``
days, as in the model). It is cancelled through the page's Cancel path
(``jobs.report.report_cancel``, what the Cancel button's view calls) once its row
shows ``cancel_at_pct`` percent, resumed (``report_resume``, the Resume button's
path), and compared with an uninterrupted run over the same loans.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    Chart,
    Lab,
    LabError,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.harness.jsnum import js_fixed_number, js_round
from jobs import report
from jobs.models import JobStatus
from library.models import Book, Branch, Loan, Member

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem

CHUNK_SIZES = (100, 500, 3000, 10000)
DAYS_CYCLE = 30
# The live part writes this many real loans at most (one throwaway branch).
LIVE_MAX_RECORDS = 60_000
LIVE_MIN_CHUNKS = 3
# Pause after each live chunk, so the lab sees the threshold before the next one.
LIVE_PAUSE_MS = 400
LIVE_TIMEOUT_S = 240.0


@dataclass
class StatusRecord:
    """The lesson's ``job_status`` row: what a run stored after its last chunk."""

    status: str = ""
    processed: int = 0
    total: int = 0


def loan_days(records: int) -> list[int]:
    """Return the days of loans 1..records, in loan id order (the lesson's data)."""
    return [i % DAYS_CYCLE for i in range(1, records + 1)]


def generate_report(
    record: StatusRecord,
    days: list[int],
    chunk: int,
    cancel_at_pct: int | None,
) -> bool:
    """Run the lesson's ``generateReport`` on ``record``; return False if cancelled.

    1. Start from the stored processed count and total (zero on a first run).
    2. At the top of every round, stop if the signal was raised (status cancelled).
    3. Add up one chunk by offset, store processed and total, then report the
       percent; reaching ``cancel_at_pct`` raises the signal.
    4. When processed reaches the record count, store status done.
    """
    count = len(days)
    processed, total = record.processed, record.total
    aborted = False
    while processed < count:
        if aborted:
            record.status = "cancelled"
            return False
        total += sum(days[processed : processed + chunk])
        processed += chunk
        record.status, record.processed, record.total = "running", processed, total
        percent = js_round(processed / count * 100)
        if cancel_at_pct is not None and percent >= cancel_at_pct:
            aborted = True
    record.status, record.processed, record.total = "done", processed, total
    return True


def _average(total: int, records: int) -> float:
    return js_fixed_number(total / records, 2)


def model(params: Params, progress: Progress) -> Tables:
    records = int_param(params, "records")
    chunk = int_param(params, "chunk")
    cancel_at = int_param(params, "cancel_at_pct")
    days = loan_days(records)

    progress(0.1, "first run, cancelled at the threshold")
    record = StatusRecord()
    generate_report(record, days, chunk, cancel_at)
    cancelled: list[Cell] = [record.processed, record.total, record.status]

    progress(0.5, "second run, from the stored checkpoint")
    generate_report(record, days, chunk, None)
    resumed: list[Cell] = [
        record.processed,
        record.total,
        _average(record.total, records),
    ]

    progress(0.9, "chunk sizes")
    chunking: list[list[Cell]] = [
        [size, math.ceil(records / size), size] for size in CHUNK_SIZES
    ]
    return {
        "cancelled": table(["processed", "total", "status"], [cancelled]),
        "resumed": table(["processed", "total", "average_days"], [resumed]),
        "chunking": table(["chunk", "progress_writes", "worst_cancel_delay"], chunking),
    }


# --- live part ------------------------------------------------------------------------

LIVE_COLUMNS = ["run", "processed", "total", "status", "average_days"]


def live(params: Params, progress: Progress) -> Tables:
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
    from django.db import connection

    records = int_param(params, "records")
    chunk = int_param(params, "chunk")
    cancel_at = int_param(params, "cancel_at_pct")
    if records > LIVE_MAX_RECORDS:
        raise LabError(
            f"live: at most {LIVE_MAX_RECORDS} loans are written for the live "
            f"report, got records={records}"
        )
    if math.ceil(records / chunk) < LIVE_MIN_CHUNKS:
        raise LabError(
            f"live: records / chunk gives fewer than {LIVE_MIN_CHUNKS} chunks; "
            "nothing could be cancelled half-way"
        )
    if connection.in_atomic_block:
        raise LabError("live: run the live part outside a database transaction")
    run = harness.new_run_id()
    scope = _LiveScope(run)
    try:
        scope.create(records)
        with harness.live_system(
            run=run, progress=progress, workers=1, private_queue=True
        ) as system:
            rows = _live_runs(system, scope, chunk, cancel_at, records, progress)
    finally:
        scope.delete()
    return {"live_cancel_resume": table(LIVE_COLUMNS, rows)}


class _LiveScope:
    """The live part's throwaway branch, book, member and loans."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.branch_id: int | None = None
        self.job_ids: list[uuid.UUID] = []

    def create(self, records: int) -> None:
        import datetime

        from django.db import transaction

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
        from django.db import transaction

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
    records: int,
    progress: Progress,
) -> list[list[Cell]]:

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
    processed, days = counts(stopped)
    rows: list[list[Cell]] = [["cancelled", processed, days, stopped.state, None]]

    if stopped.state == JobStatus.State.CANCELLED:
        harness.live_step(progress, 0.5, "resume from the checkpoint")
        report.report_resume(job_id=job.pk, queue=system.private_queue)
    resumed = wait_finished(job.pk, "the resumed report")
    processed, days = counts(resumed)
    rows.append(["resumed", processed, days, resumed.state, _average(days, records)])

    harness.live_step(progress, 0.75, "the same report, uninterrupted")
    clean = report.monthly_report_start(
        month=report.ALL_MONTHS,
        branch=scope.branch_id,
        chunk=chunk,
        queue=system.private_queue,
    )
    scope.job_ids.append(clean.pk)
    finished = wait_finished(clean.pk, "the uninterrupted report")
    processed, days = counts(finished)
    rows.append(
        ["uninterrupted", processed, days, finished.state, _average(days, records)]
    )
    return rows


LAB = Lab(
    slug="long-running-jobs",
    title="Long-Running Jobs",
    params=(
        Param(
            "records",
            "int",
            30000,
            "loan records the report adds up",
            minimum=1,
            maximum=1_000_000,
        ),
        Param(
            "chunk",
            "int",
            3000,
            "records per round: one status write and one cancel check each",
            minimum=1,
            maximum=1_000_000,
        ),
        Param(
            "cancel_at_pct",
            "int",
            40,
            "the first run is cancelled once its progress reaches this percent",
            minimum=0,
            maximum=100,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="chunking",
            label="chunk",
            values=("progress_writes",),
            title="Progress writes per chunk size",
        ),
    ),
    notes=(
        "The live part writes `records` throwaway loans (one temporary branch, "
        "deleted afterwards) and runs the real report on a real rq worker."
    ),
)
