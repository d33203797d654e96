"""The parameters of the publish-subscribe lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``PublishSubscribeParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "rounds",
        "int",
        6,
        "rounds in the slow-subscriber run",
        minimum=1,
        maximum=500,
        work="value",
    ),
    Param(
        "per_round",
        "int",
        4,
        "events published per round",
        minimum=0,
        maximum=500,
        work="value",
    ),
    Param(
        "budget",
        "int",
        6,
        "time units each subscription may spend per round",
        minimum=0,
        maximum=1_000_000,
    ),
    Param(
        "slow_duration",
        "int",
        3,
        "time units the report subscriber needs per message (the others need 1)",
        minimum=0,
        maximum=1_000_000,
    ),
)


@dataclass(frozen=True)
class PublishSubscribeParams(LabParams):
    """The lab's parameters, one typed field each."""

    rounds: int
    per_round: int
    budget: int
    slow_duration: int
