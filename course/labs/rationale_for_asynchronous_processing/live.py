"""The live part of the rationale lab: real child processes that issue loans and die,
with an in-memory and an outbox hand-off.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.processes import child_environment, start_manage
from course.instruments.probes import probe_dir
from course.labs.harness import live as harness
from course.labs.harness.base import (
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live_loans import SIDE_JOB_DELAY_S, loan_side_jobs
from course.labs.rationale_for_asynchronous_processing.params import (
    RationaleParams,
)
from library.models import Book, Branch, Loan, Member
from library.services import loan_return
from messaging.models import Delivery, OutboxMessage
from messaging.registry import MessageType

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem

# --- live part ---------------------------------------------------------------------

LIVE_LOANS = 3
LIVE_HANDOFFS = (("in memory", "in-memory"), ("outbox", "outbox"))
CHILD_TIMEOUT_S = 60.0


def live_loans() -> list[tuple[int, int]]:
    """Return (member, book) pairs: three members, three books of one branch."""

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


@dataclass(frozen=True)
class Handoff:
    """What one hand-off left after its process was killed."""

    handoff: str
    loans: int  # loans issued (and answered) before the kill
    loan_rows: int  # of them in the database
    done_before_kill: int | None  # side jobs done before the kill (in memory only)
    recoverable: int  # side jobs anything durable still names
    done_after_restart: int


@dataclass(frozen=True)
class Measurement:
    side_jobs: list[str]  # the side jobs of one loan
    handoffs: list[Handoff]


def measure(params: RationaleParams, progress: Progress) -> Measurement:
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
    pairs = live_loans()
    run = harness.new_run_id()
    handoffs: list[Handoff] = []
    with harness.live_system(run=run, progress=progress) as system:
        for index, (handoff, flag) in enumerate(LIVE_HANDOFFS):
            harness.live_step(
                progress, 0.1 + 0.4 * index, f"{handoff}: 3 loans, then SIGKILL"
            )
            loan_ids, side_dir = _issue_and_die(system, handoff, flag, pairs)
            try:
                loan_rows = Loan.objects.filter(pk__in=loan_ids).count()
                if flag == "in-memory":
                    done_before = len(list(side_dir.glob("*")))
                    # Nothing durable lists a job still waiting in the dead
                    # process's memory, so nothing can be recovered; wait past the
                    # thread's delay to see that none of them ever runs.
                    time.sleep(SIDE_JOB_DELAY_S + 0.5)
                    done_after = len(list(side_dir.glob("*")))
                    handoffs.append(
                        Handoff(
                            handoff,
                            len(loan_ids),
                            loan_rows,
                            done_before,
                            0,
                            done_after,
                        )
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
                handoffs.append(
                    Handoff(
                        handoff, len(loan_ids), loan_rows, None, recoverable, done_after
                    )
                )
            finally:
                for loan_id in loan_ids:
                    loan_return(loan_id=loan_id)
    # The system's side jobs of a loan are the subscriptions its message reaches
    # (three, as in the lesson, while the registry has three for loans).
    return Measurement(loan_side_jobs(), handoffs)


def tables(params: RationaleParams, measured: Measurement) -> Tables:
    """What each hand-off kept through the kill, and what ran afterwards."""
    names = " ".join(measured.side_jobs)
    return {
        "live_durability": table(
            ["handoff", "loan_rows", "recoverable_jobs"],
            [[h.handoff, h.loan_rows, h.recoverable] for h in measured.handoffs],
        ),
        "live_side_jobs": table(
            [
                "handoff",
                "side_jobs_per_loan",
                "handed_off",
                "done_before_kill",
                "recoverable_jobs",
                "done_after_restart",
            ],
            [
                [
                    h.handoff,
                    names,
                    h.loans * len(measured.side_jobs),
                    h.done_before_kill,
                    h.recoverable,
                    h.done_after_restart,
                ]
                for h in measured.handoffs
            ],
        ),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
