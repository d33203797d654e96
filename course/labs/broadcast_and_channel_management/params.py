"""The parameters of the broadcast-and-channel-management lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``BroadcastParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "instances",
        "int",
        2,
        "application instances (the subscriber is on the last)",
        minimum=2,
        maximum=6,
    ),
)


@dataclass(frozen=True)
class BroadcastParams(LabParams):
    """The lab's parameters, one typed field each."""

    instances: int
