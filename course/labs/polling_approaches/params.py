"""The parameters of the polling-approaches lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``PollingApproachesParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "hold_ms",
        "int",
        1000,
        "how long a long poll is held before 204 (ms)",
        minimum=1,
        maximum=30_000,
    ),
)


@dataclass(frozen=True)
class PollingApproachesParams(LabParams):
    """The lab's parameters, one typed field each."""

    hold_ms: int
