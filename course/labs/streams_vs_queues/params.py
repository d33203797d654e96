"""The parameters of the streams-vs-queues lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``StreamsVsQueuesParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "keep",
        "int",
        4,
        "newest records the retention rule keeps (the log holds 10)",
        minimum=0,
        maximum=1_000_000,
    ),
)


@dataclass(frozen=True)
class StreamsVsQueuesParams(LabParams):
    """The lab's parameters, one typed field each."""

    keep: int
