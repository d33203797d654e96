"""The parameters of the delivery-semantics lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``DeliverySemanticsParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "messages",
        "int",
        12,
        "overdue notifications in the outbox (0: an empty outbox)",
        minimum=0,
        maximum=5000,
        work="value",
    ),
    Param(
        "crashes",
        "int_list",
        [3, 7, 11],
        "message ids whose first attempt dies half-way (none: no crash)",
        minimum=1,
        maximum=5000,
        min_items=0,
        max_items=50,
    ),
)


@dataclass(frozen=True)
class DeliverySemanticsParams(LabParams):
    """The lab's parameters, one typed field each."""

    messages: int
    crashes: list[int]
