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

from course.labs.harness.base import Chart, Lab
from course.labs.rationale_for_asynchronous_processing import live, model
from course.labs.rationale_for_asynchronous_processing.params import (
    PARAMS,
    RationaleParams,
)

__all__ = ["LAB"]


LAB = Lab(
    slug="rationale-for-asynchronous-processing",
    title="Rationale for Asynchronous Processing",
    params=PARAMS,
    params_type=RationaleParams,
    model=model.model,
    live=live.LIVE,
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
