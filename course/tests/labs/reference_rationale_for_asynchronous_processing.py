"""An independent re-implementation of the rationale lab, shaped differently on purpose.

None of this imports ``course/labs``: each message is a small state machine, or its
count follows from how many attempts it needs; rounding goes through Fractions.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import accumulate

from course.tests.labs.reference import Row, fixed


def whole(x: float) -> object:
    return int(x) if float(x).is_integer() else x


COSTS = [3, 9, 140, 260, 55]


NEEDED_FOR_RESPONSE = [True, True, False, False, False]


NAMES = [
    "authorization check",
    "writing the loan record",
    "overdue notification",
    "branch stock summary recalculation",
    "monthly report line",
]


def rationale(success_probability: float) -> dict[str, list[Row]]:
    running = list(accumulate(COSTS))
    steps: list[Row] = [
        [name, ms, "required" if need else "deferrable", acc]
        for name, ms, need, acc in zip(
            NAMES, COSTS, NEEDED_FOR_RESPONSE, running, strict=True
        )
    ]
    total = running[-1]
    kept = [ms for ms, need in zip(COSTS, NEEDED_FOR_RESPONSE, strict=True) if need]
    required = sum(kept)
    p = Fraction(success_probability)
    # The exact power: the double result of p**n is within one ulp of it, which
    # only matters on a five-decimal tie.
    summary: Row = [
        total,
        required,
        fixed(1 - Fraction(required, total), 3),
        fixed(Fraction(1000, total), 1),
        fixed(Fraction(1000, required), 1),
        fixed(p ** len(COSTS), 5),
        fixed(p ** len(kept), 5),
    ]
    # A volatile list dies with the process; a row committed with the loan does not.
    loans, jobs_per_loan = 3, 3
    durable_after_restart = {"in memory": 0, "outbox": loans * jobs_per_loan}
    durability: list[Row] = [
        [handoff, loans, jobs] for handoff, jobs in durable_after_restart.items()
    ]
    return {
        "steps": steps,
        "summary": [[whole(x) if isinstance(x, float) else x for x in summary]],
        "durability": durability,
    }
