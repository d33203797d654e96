"""Lab for "Rationale for Asynchronous Processing": what leaves the request, and where.

Model part, three measurements on the lesson's loan request:

1. ``steps`` — the five modelled steps of a loan with their cost, whether the response
   depends on them, and the running total.
2. ``summary`` — request time with every step against only the required ones, the
   shortening ratio, one worker's throughput, and the chance that every external
   dependency answers (``success_probability`` per step).
3. ``durability`` — three loans whose three side jobs each are handed off either to a
   list in process memory or to an outbox table in the loan's own transaction. The
   process then "exits" and a fresh connection counts what survived. This runs on a
   throwaway SQLite file: only a real file outlives the connection that wrote it.

Rounding follows the course's ``toFixed`` calls: three decimals for the ratio, one for
throughput, five for the probabilities (shown as numbers, so 0.99800 is 0.998).
"""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    LabError,
    Param,
    Params,
    Progress,
    Tables,
    float_param,
    table,
)
from course.labs.jsnum import js_fixed_number

if TYPE_CHECKING:
    from course.labs.live import LiveSystem


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


def model(params: Params, progress: Progress) -> Tables:
    probability = float_param(params, "success_probability")
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


# --- live part ---------------------------------------------------------------------

LIVE_LOANS = 3
LIVE_HANDOFFS = (("in memory", "in-memory"), ("outbox", "outbox"))
CHILD_TIMEOUT_S = 60.0


def _live_loans() -> list[tuple[int, int]]:
    """Return (member, book) pairs: three members, three books of one branch."""
    from library.models import Book, Branch, Member

    members = list(Member.objects.order_by("id").values_list("id", flat=True)[:3])
    for branch_id in Branch.objects.order_by("id").values_list("id", flat=True):
        books = list(
            Book.objects.filter(branch_id=branch_id, on_shelf__gte=1)
            .order_by("-on_shelf", "id")
            .values_list("id", flat=True)[:LIVE_LOANS]
        )
        if len(books) == LIVE_LOANS and len(members) == LIVE_LOANS:
            return list(zip(members, books, strict=True))
    raise LabError(
        "live: the library needs a branch with 3 books on the shelf and 3 members "
        "(python manage.py seed_library)"
    )


def _none_left(rows: Any) -> bool:
    return not rows.exists()


def _issue_and_die(
    system: LiveSystem, handoff: str, flag: str, pairs: list[tuple[int, int]]
) -> tuple[list[int], Path]:
    """Run the child that issues the loans and is killed right after answering."""
    import signal

    from jobs.processes import child_environment, start_manage
    from messaging.probes import probe_dir

    folder = probe_dir(system.run)
    answers = folder / f"answers-{flag}"
    side_jobs = folder / f"side-jobs-{flag}"
    args = ["labchild", "loans", "--handoff", flag, "--answers", str(answers)]
    args += ["--side-jobs-dir", str(side_jobs)]
    for member, book in pairs:
        args += ["--loan", f"{member}:{book}"]
    child = start_manage(*args, env=child_environment(LOG_LEVEL="WARNING"))
    try:
        code = child.wait(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise LabError(
            f"live: the {handoff} loan request did not finish in {CHILD_TIMEOUT_S:g} s"
        ) from None
    loan_ids = [int(line) for line in answers.read_text().split()]
    if code != -signal.SIGKILL or len(loan_ids) != len(pairs):
        raise LabError(
            f"live: the {handoff} loan request ended with status {code} after "
            f"{len(loan_ids)} of {len(pairs)} loans (expected death by SIGKILL)"
        )
    return loan_ids, side_jobs


def live(params: Params, progress: Progress) -> Tables:
    """A real process issues three loans and is SIGKILLed right after answering.

    ``in memory``: each loan's side jobs go to a background thread of that process,
    which starts them after a delay; after the kill, count what names them anywhere
    (nothing can: only the dead process's memory did). ``outbox``: the side jobs are
    the deliveries of the loans' outbox messages, written in each loan's
    transaction; after the kill, count them and let the workers run them. The real
    ``loan_issue`` writes its outbox message in both runs: the ``in memory`` row
    counts only what its own hand-off left. The loans are returned afterwards
    (``loan_return``), so the library keeps its shelf counts.
    """
    import time

    from course.labs import live as harness
    from course.management.commands.labchild import SIDE_JOB_DELAY_S, loan_side_jobs
    from library.models import Loan
    from library.services import loan_return
    from messaging.models import Delivery, OutboxMessage
    from messaging.registry import MessageType

    pairs = _live_loans()
    # The system's side jobs of a loan are the subscriptions its message reaches
    # (three, as in the lesson, while the registry has three for loans).
    side_jobs = loan_side_jobs()
    names = " ".join(side_jobs)
    run = harness.new_run_id()
    rows: list[list[Cell]] = []
    detail: list[list[Cell]] = []
    with harness.live_system(run=run, progress=progress) as system:
        for index, (handoff, flag) in enumerate(LIVE_HANDOFFS):
            harness.live_step(
                progress, 0.1 + 0.4 * index, f"{handoff}: 3 loans, then SIGKILL"
            )
            loan_ids, side_dir = _issue_and_die(system, handoff, flag, pairs)
            try:
                loan_rows = Loan.objects.filter(pk__in=loan_ids).count()
                handed_off = len(loan_ids) * len(side_jobs)
                if flag == "in-memory":
                    done_before = len(list(side_dir.glob("*")))
                    # Nothing durable lists a job still waiting in the dead
                    # process's memory, so nothing can be recovered; wait past the
                    # thread's delay to see that none of them ever runs.
                    recoverable = 0
                    time.sleep(SIDE_JOB_DELAY_S + 0.5)
                    done_after = len(list(side_dir.glob("*")))
                    rows.append([handoff, loan_rows, recoverable])
                    detail.append(
                        [
                            handoff,
                            names,
                            handed_off,
                            done_before,
                            recoverable,
                            done_after,
                        ]
                    )
                    continue
                messages = OutboxMessage.objects.filter(
                    type=MessageType.LOAN_ISSUED, body__loan_id__in=loan_ids
                )
                harness.wait_until(
                    partial(_none_left, messages.filter(relayed_at__isnull=True)),
                    what="the relay of the loans' messages",
                    timeout=30,
                    system=system,
                )
                deliveries = Delivery.objects.filter(message__in=messages)
                recoverable = deliveries.count()
                harness.live_step(progress, 0.8, "outbox: the workers run them")
                harness.wait_until(
                    partial(_none_left, deliveries.filter(status="pending")),
                    what="the loans' side jobs",
                    timeout=60,
                    system=system,
                )
                done_after = deliveries.filter(status="done").count()
                rows.append([handoff, loan_rows, recoverable])
                detail.append(
                    [handoff, names, handed_off, None, recoverable, done_after]
                )
            finally:
                for loan_id in loan_ids:
                    loan_return(loan_id=loan_id)
    return {
        "live_durability": table(["handoff", "loan_rows", "recoverable_jobs"], rows),
        "live_side_jobs": table(
            [
                "handoff",
                "side_jobs_per_loan",
                "handed_off",
                "done_before_kill",
                "recoverable_jobs",
                "done_after_restart",
            ],
            detail,
        ),
    }


LAB = Lab(
    slug="rationale-for-asynchronous-processing",
    title="Rationale for Asynchronous Processing",
    params=(
        Param(
            "success_probability",
            "float",
            0.999,
            "chance that one step's dependency answers",
            minimum=0,
            maximum=1,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="steps",
            label="step",
            values=("ms",),
            title="Modelled cost of each step of a loan request",
            unit="ms",
        ),
        Chart(
            table="durability",
            label="handoff",
            values=("loan_rows", "recoverable_jobs"),
            title="What a restarted process finds",
            unit="rows",
        ),
    ),
)
