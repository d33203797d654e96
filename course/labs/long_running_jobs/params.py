"""The parameters of the long-running-jobs lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``LongRunningJobsParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "records",
        "int",
        30000,
        "loan records the report adds up",
        minimum=1,
        maximum=1_000_000,
        work="value",
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
)


@dataclass(frozen=True)
class LongRunningJobsParams(LabParams):
    """The lab's parameters, one typed field each."""

    records: int
    chunk: int
    cancel_at_pct: int
