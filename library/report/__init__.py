"""The monthly loan report: a long job in chunks, with checkpoint, cancel and resume.

Scope. A report covers the loans picked up in one calendar month (``month``,
"YYYY-MM"), or every loan (``month="all"``), optionally of one branch. Called with
no month, it reports the month that just ended (the scheduled run,
``start.monthly_report_start_for_slot``, passes the month before its slot). A loan
counts the days it was out up to the report's cut date ``as_of``: its return date,
or the cut date while it is still open. The cut date (the first day after the month,
or today if that is earlier; today for "all") and the number of loans in scope are
fixed when the report is started and stored in its params, so a resumed run counts
the same loans the same way.

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

Sub-modules: ``scope`` (names, limits, params, checkpoint and the loans in scope),
``start`` (start, cancel, resume), ``run`` (the chunked run), ``cancellation`` (the
stop reasons read at chunk boundaries), ``csv_rows`` (the finished report as CSV),
``selectors`` (the report rows a page shows), ``views`` and ``urls`` (the pages:
start, follow, cancel, resume, download) and ``stream`` (a month's loans as a
streamed CSV, ``/realtime/reports/loans.csv``).

The rq entry point is ``library.report.run.report_run`` (rq stores a job's function
by that dotted path). It lived in ``jobs.report`` until the report moved to the
library (issue #13); jobs must not import the library, so no alias is left there:
an rq job queued before the upgrade fails on import, and its row stays queued.
LibraryConfig.ready() registers the report's kind as resumable (jobs.resumable).
"""

from __future__ import annotations

from jobs.services import REASON_OPERATOR
from library.report.csv_rows import report_csv_rows, report_filename
from library.report.run import report_execute, report_run
from library.report.scope import (
    ALL_MONTHS,
    CSV_COLUMNS,
    DEFAULT_CHUNK,
    LEASE_S,
    MAX_CHUNK,
    MAX_PAUSE_MS,
    REASON_SHUTDOWN,
    REASON_TIME_LIMIT,
    REASON_USER,
    REPORT_KIND,
    REPORT_NAME,
    REPORT_QUEUE,
    RQ_TIMEOUT_S,
    Announce,
    BranchTotals,
    Checkpoint,
    ReportError,
    ReportParams,
    month_bounds,
    previous_month,
)
from library.report.start import monthly_report_start, report_cancel, report_resume

__all__ = [
    "ALL_MONTHS",
    "CSV_COLUMNS",
    "DEFAULT_CHUNK",
    "LEASE_S",
    "MAX_CHUNK",
    "MAX_PAUSE_MS",
    "REASON_OPERATOR",
    "REASON_SHUTDOWN",
    "REASON_TIME_LIMIT",
    "REASON_USER",
    "REPORT_KIND",
    "REPORT_NAME",
    "REPORT_QUEUE",
    "RQ_TIMEOUT_S",
    "Announce",
    "BranchTotals",
    "Checkpoint",
    "ReportError",
    "ReportParams",
    "month_bounds",
    "monthly_report_start",
    "previous_month",
    "report_cancel",
    "report_csv_rows",
    "report_execute",
    "report_filename",
    "report_resume",
    "report_run",
]
