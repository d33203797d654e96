"""The parameters of the dead-letter-queues lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``DeadLetterQueuesParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "messages",
        "int",
        20,
        "overdue notifications (0: none to deliver)",
        minimum=0,
        maximum=5000,
        work="value",
    ),
    Param(
        "permanent",
        "int_list",
        [7, 13],
        "message ids that fail on every attempt (none: every message can succeed)",
        minimum=1,
        maximum=5000,
        min_items=0,
        max_items=50,
    ),
    Param(
        "threshold",
        "int",
        3,
        "attempts before a message is isolated (third retry row, redrive)",
        minimum=1,
        maximum=100,
    ),
    Param(
        "thresholds",
        "int_list",
        [1, 2, 3, 5, 8],
        "threshold values compared in the selection table (none: no rows)",
        minimum=1,
        maximum=100,
        min_items=0,
        work="count",
    ),
)


@dataclass(frozen=True)
class DeadLetterQueuesParams(LabParams):
    """The lab's parameters, one typed field each."""

    messages: int
    permanent: list[int]
    threshold: int
    thresholds: list[int]
