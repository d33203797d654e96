"""The parameters of the poison-messages-and-retry lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``PoisonMessagesParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.jsnum import SEED_MAX

PARAMS: tuple[Param, ...] = (
    Param(
        "base_ms",
        "int",
        500,
        "first exponential wait",
        minimum=0,
        maximum=1_000_000,
    ),
    Param(
        "cap_ms",
        "int",
        30_000,
        "longest wait of the capped schedules",
        minimum=0,
        maximum=100_000_000,
    ),
    Param(
        "budget_ms",
        "int",
        300_000,
        "time budget for waiting between attempts",
        minimum=0,
        maximum=1_000_000_000,
    ),
    Param(
        "consumers",
        "int",
        200,
        "consumers failing at the same instant",
        minimum=1,
        maximum=10_000,
        work="value",
    ),
    Param("attempts", "int", 4, "retries per consumer", minimum=1, maximum=100),
    Param(
        "bucket_ms",
        "int",
        100,
        "width of a counting slot",
        minimum=1,
        maximum=1_000_000,
    ),
    Param(
        "seed",
        "int",
        20250720,
        "seed of the course's generator",
        minimum=0,
        maximum=SEED_MAX,
    ),
)


@dataclass(frozen=True)
class PoisonMessagesParams(LabParams):
    """The lab's parameters, one typed field each."""

    base_ms: int
    cap_ms: int
    budget_ms: int
    consumers: int
    attempts: int
    bucket_ms: int
    seed: int
