"""The parameters of the scheduled-tasks lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``ScheduledTasksParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

MAX_RUNS = 24


PARAMS: tuple[Param, ...] = (
    Param(
        "start",
        "str",
        "2026-01-31T23:47:00Z",
        "the instant the schedule is read from (ISO 8601; no offset means UTC)",
        max_length=40,
    ),
    Param(
        "runs",
        "int",
        3,
        "run instants listed per definition",
        minimum=1,
        maximum=MAX_RUNS,
        work="value",
    ),
)


@dataclass(frozen=True)
class ScheduledTasksParams(LabParams):
    """The lab's parameters, one typed field each."""

    start: str
    runs: int
