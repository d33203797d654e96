"""The model part of the rationale lab: the steps of a loan, the chance all succeed,
and what survives a restart with an in-memory or an outbox hand-off.
"""

from __future__ import annotations

import json
import math
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

from course.labs.harness.base import Cell, Progress, Tables, table
from course.labs.harness.jsnum import js_fixed_number
from course.labs.rationale_for_asynchronous_processing.params import (
    RationaleParams,
)


@dataclass(frozen=True)
class Step:
    name: str
    ms: int
    # True when the response would be wrong without this step (content, rejection or
    # an invariant depends on it); False when doing it eventually is enough.
    required: bool


STEPS: tuple[Step, ...] = (
    Step("authorization check", 3, True),
    Step("writing the loan record", 9, True),
    Step("overdue notification", 140, False),
    Step("branch stock summary recalculation", 260, False),
    Step("monthly report line", 55, False),
)

# (member, book) of the three loans issued before the process goes away.
LOANS: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (3, 3))
SIDE_JOBS = ("overdue_notification", "stock_summary", "report_line")
HANDOFFS = ("in memory", "outbox")
ISSUED_ON = "2025-07-20"

# Only what the count needs: a loan, and a side job waiting in the outbox.
_SCHEMA = """
CREATE TABLE loans (
    id INTEGER PRIMARY KEY,
    member INTEGER NOT NULL,
    book INTEGER NOT NULL,
    issued_on TEXT NOT NULL
);
CREATE TABLE outbox_rows (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending'
);
"""


def step_rows() -> list[list[Cell]]:
    """Return one row per step: name, cost, kind and the running total."""
    rows: list[list[Cell]] = []
    running = 0
    for step in STEPS:
        running += step.ms
        kind = "required" if step.required else "deferrable"
        rows.append([step.name, step.ms, kind, running])
    return rows


def summary_row(success_probability: float) -> list[Cell]:
    """Return the summary: durations, ratio, throughput and success chances."""
    total = sum(step.ms for step in STEPS)
    required = sum(step.ms for step in STEPS if step.required)
    dependencies_all = len(STEPS)
    dependencies_required = sum(1 for step in STEPS if step.required)
    # Every step is an independent dependency; the request needs all of them at once.
    # math.pow is libm's pow, which can differ from V8's ``**`` by one ulp; after
    # rounding to five decimals that only matters on an exact tie, which p**n with
    # a decimal p never produces.
    success_before = math.pow(success_probability, dependencies_all)
    success_after = math.pow(success_probability, dependencies_required)
    return [
        total,
        required,
        js_fixed_number(1 - required / total, 3),
        js_fixed_number(1000 / total, 1),
        js_fixed_number(1000 / required, 1),
        js_fixed_number(success_before, 5),
        js_fixed_number(success_after, 5),
    ]


def _issue_loans(path: Path, *, handoff: str) -> int:
    """Issue the loans in one "process" and return the side jobs it held in memory.

    The connection is closed before returning and the list is dropped with the
    function's frame: that is the process exiting without flushing anything.
    """
    pending_in_memory: list[tuple[str, int]] = []
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        for member_id, book_id in LOANS:
            connection.execute("BEGIN IMMEDIATE")
            cursor = connection.execute(
                "INSERT INTO loans (member, book, issued_on) VALUES (?, ?, ?)",
                (member_id, book_id, ISSUED_ON),
            )
            loan_id = cursor.lastrowid
            assert loan_id is not None
            if handoff == "outbox":
                # Same transaction as the loan: both survive or neither does.
                body = json.dumps(
                    {"loanId": loan_id, "memberId": member_id, "bookId": book_id},
                    separators=(",", ":"),
                )
                for kind in SIDE_JOBS:
                    connection.execute(
                        "INSERT INTO outbox_rows (kind, payload) VALUES (?, ?)",
                        (kind, body),
                    )
            connection.execute("COMMIT")
            if handoff == "in memory":
                pending_in_memory.extend((kind, loan_id) for kind in SIDE_JOBS)
    finally:
        connection.close()
    return len(pending_in_memory)


def _count_after_restart(path: Path) -> tuple[int, int]:
    """Return (loans, pending outbox rows) as a freshly started process sees them."""
    connection = sqlite3.connect(path)
    try:
        (loans,) = connection.execute("SELECT count(*) FROM loans").fetchone()
        (pending,) = connection.execute(
            "SELECT count(*) FROM outbox_rows WHERE state = ?", ("pending",)
        ).fetchone()
    finally:
        connection.close()
    return int(loans), int(pending)


def durability() -> tuple[list[list[Cell]], list[list[Cell]]]:
    """Return (durability rows, side jobs handed off before the exit)."""
    rows: list[list[Cell]] = []
    handed_off: list[list[Cell]] = []
    with tempfile.TemporaryDirectory(prefix="lab-rationale-") as directory:
        for handoff in HANDOFFS:
            path = Path(directory) / f"{handoff.replace(' ', '-')}.db"
            setup = sqlite3.connect(path)
            try:
                setup.executescript(_SCHEMA)
            finally:
                setup.close()
            in_memory = _issue_loans(path, handoff=handoff)
            loans, recoverable = _count_after_restart(path)
            rows.append([handoff, loans, recoverable])
            jobs = in_memory if handoff == "in memory" else recoverable
            handed_off.append([handoff, jobs])
    return rows, handed_off


def model(params: RationaleParams, progress: Progress) -> Tables:
    probability = params.success_probability
    progress(0.05, "steps: cost of each step of a loan request")
    steps = step_rows()
    progress(0.3, "summary: duration, throughput and success probability")
    summary = summary_row(probability)
    progress(0.5, "durability: side jobs in memory versus in the outbox")
    durable, handed_off = durability()
    return {
        "steps": table(["step", "ms", "kind", "accumulated_ms"], steps),
        "summary": table(
            [
                "all_in_request_ms",
                "required_only_ms",
                "shortening_ratio",
                "throughput_before",
                "throughput_after",
                "success_before",
                "success_after",
            ],
            [summary],
        ),
        "durability": table(["handoff", "loan_rows", "recoverable_jobs"], durable),
        "handed_off": table(["handoff", "side_jobs"], handed_off),
    }
