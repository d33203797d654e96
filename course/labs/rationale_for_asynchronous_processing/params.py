"""The parameters of the rationale-for-asynchronous-processing lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``RationaleParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "success_probability",
        "float",
        0.999,
        "chance that one step's dependency answers",
        minimum=0,
        maximum=1,
    ),
)


@dataclass(frozen=True)
class RationaleParams(LabParams):
    """The lab's parameters, one typed field each."""

    success_probability: float
