"""The finished report as CSV: its rows and its file name."""

from __future__ import annotations

from collections.abc import Iterator

from jobs.models import JobStatus
from library.report.scope import ALL_MONTHS, CSV_COLUMNS


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
