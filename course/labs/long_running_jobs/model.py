"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.jsnum import js_fixed_number, js_round
from course.labs.long_running_jobs.params import LongRunningJobsParams

if TYPE_CHECKING:
    pass


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


def average(total: int, records: int) -> float:
    return js_fixed_number(total / records, 2)


def model(params: LongRunningJobsParams, progress: Progress) -> Tables:
    records = params.records
    chunk = params.chunk
    cancel_at = params.cancel_at_pct
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
        average(record.total, records),
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
