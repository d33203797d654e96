"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

import datetime
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

from config.processes import WaitTimeout, kill, wait_until
from course.labs.harness.base import (
    Cell,
    LabError,
    ParamError,
    Progress,
    Table,
    Tables,
    table,
)
from course.labs.scheduled_tasks.params import ScheduledTasksParams
from jobs.recurrence import Daily, Every, MonthEnd, Monthly, Recurrence, next_runs

# The lesson's definitions; every monthly run is at 02:30 UTC.
DEFINITIONS: tuple[tuple[str, Recurrence], ...] = (
    ("overdue_notification", Daily(hour=6, minute=0)),
    ("inventory_summary", Every.minutes(15)),
    ("monthly_report", Monthly(day=1, hour=2, minute=30, month_end=MonthEnd.OVERFLOW)),
    ("end_of_month", Monthly(day=31, hour=2, minute=30, month_end=MonthEnd.OVERFLOW)),
    ("end_of_month_clamp", Monthly(31, 2, 30, MonthEnd.CLAMP)),
    ("end_of_month_skip", Monthly(31, 2, 30, MonthEnd.SKIP)),
)
MODES = ("unlocked", "locked")
OVERLAP_COLUMNS = ["mode", "runs", "skipped", "concurrent_peak"]
REPORT_MS = 300  # how long the lesson's report takes
LEASE_MS = 5000
PROCESS_TIMEOUT_S = 120.0


def parse_start(text: str) -> datetime.datetime:
    """Return the ``start`` parameter as an aware UTC instant (no offset means UTC)."""
    try:
        start = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ParamError(
            f"start: {text!r} is not an ISO 8601 instant (2026-01-31T23:47:00Z)"
        ) from None
    if start.tzinfo is None:
        start = start.replace(tzinfo=datetime.UTC)
    return start.astimezone(datetime.UTC)


def check(params: ScheduledTasksParams) -> str | None:
    try:
        parse_start(params.start)
    except ParamError as exc:
        return str(exc)
    return None


def next_runs_table(start: datetime.datetime, runs: int) -> Table:
    columns = ["task", *(f"run_{n}" for n in range(1, runs + 1))]
    rows: list[list[Cell]] = [
        [name, *(at.strftime("%Y-%m-%d %H:%M") for at in next_runs(rule, start, runs))]
        for name, rule in DEFINITIONS
    ]
    return table(columns, rows)


def trace_counts(lines: list[str]) -> tuple[int, int, int]:
    """Return (runs, skipped, concurrent peak) from started/done/skipped lines."""
    running = peak = runs = skipped = 0
    for line in lines:
        if line.startswith("started"):
            running += 1
            runs += 1
            peak = max(peak, running)
        elif line.startswith("done"):
            running -= 1
        elif line.startswith("skipped"):
            skipped += 1
    return runs, skipped, peak


# --- model: two real processes and a lease row in SQLite ------------------------------

# One competing process: wait for the barrier, then run the report, with or without
# the lease. The lease is one upsert that changes the row only when it is absent or
# expired; ``changes() == 1`` tells the winner. Release filters on the owner.
_CHILD = textwrap.dedent(
    """
    import sqlite3, sys, time
    from pathlib import Path
    work, label, locked = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
    report_ms, lease_ms = int(sys.argv[4]), int(sys.argv[5])
    (work / f"ready-{label}").touch()
    while not (work / "go").exists():
        time.sleep(0.002)
    def trace(event):
        with open(work / "trace.log", "a") as out:
            out.write(f"{event} {label}\\n")
    def report():
        trace("started")
        time.sleep(report_ms / 1000)
        trace("done")
    if not locked:
        report()
        sys.exit(0)
    db = sqlite3.connect(work / "schedule.db", isolation_level=None, timeout=5)
    db.execute(
        "CREATE TABLE IF NOT EXISTS lease"
        " (task TEXT PRIMARY KEY, holder TEXT NOT NULL, until_ms INTEGER NOT NULL)"
    )
    now = int(time.time() * 1000)
    # Taken when absent or expired, in one statement: no read-then-write gap.
    db.execute(
        "INSERT INTO lease (task, holder, until_ms) VALUES (?, ?, ?)"
        " ON CONFLICT (task) DO UPDATE"
        " SET holder = excluded.holder, until_ms = excluded.until_ms"
        " WHERE lease.until_ms < ?",
        ("monthly-report", label, now + lease_ms, now),
    )
    if db.execute("SELECT changes()").fetchone()[0] == 1:
        try:
            report()
        finally:
            db.execute(
                "DELETE FROM lease WHERE task = ? AND holder = ?",
                ("monthly-report", label),
            )
    else:
        trace("skipped")
    """
)


def wait_for(
    condition: Callable[[], bool], what: str, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Wait until ``condition`` holds; raise LabError if a process fails first."""

    def alive() -> None:
        for process in processes:
            if process.poll() not in (None, 0):
                raise LabError(f"a competing process exited with {process.returncode}")

    try:
        wait_until(
            condition, what, timeout=PROCESS_TIMEOUT_S, interval=0.01, alive=alive
        )
    except WaitTimeout:
        raise LabError(f"gave up waiting for {what}") from None


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        kill(process)


def overlap_once(locked: bool) -> tuple[int, int, int]:
    """Start the report in two processes at once; count from their trace file."""
    with tempfile.TemporaryDirectory(prefix="lab-scheduled-") as name:
        work = Path(name)
        (work / "trace.log").touch()
        processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _CHILD,
                    str(work),
                    label,
                    "1" if locked else "0",
                    str(REPORT_MS),
                    str(LEASE_MS),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for label in ("A", "B")
        ]
        try:
            wait_for(
                lambda: len(list(work.glob("ready-*"))) == 2,
                "both processes to start",
                processes,
            )
            (work / "go").touch()  # released together
            for process in processes:
                if process.wait(timeout=PROCESS_TIMEOUT_S) != 0:
                    raise LabError(
                        f"a competing process exited with {process.returncode}"
                    )
        except subprocess.TimeoutExpired:
            raise LabError("a competing process did not finish") from None
        finally:
            _stop(processes)
        return trace_counts((work / "trace.log").read_text().splitlines())


def model(params: ScheduledTasksParams, progress: Progress) -> Tables:
    start = parse_start(params.start)
    runs = params.runs
    progress(0.05, "next_runs: six definitions")
    runs_table = next_runs_table(start, runs)
    rows: list[list[Cell]] = []
    for index, mode in enumerate(MODES):
        progress(0.3 + 0.35 * index, f"overlap: two processes, {mode}")
        rows.append([mode, *overlap_once(mode == "locked")])
    return {"next_runs": runs_table, "overlap": table(OVERLAP_COLUMNS, rows)}
