"""The parameters of the server-sent-events lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``ServerSentEventsParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "cut",
        "int",
        3,
        "events before the first connection is cut (0: not cut)",
        minimum=0,
        maximum=6,
    ),
)


@dataclass(frozen=True)
class ServerSentEventsParams(LabParams):
    """The lab's parameters, one typed field each."""

    cut: int
