"""The parameters of the backpressure lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``BackpressureParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.queueing import variability_params

PARAMS: tuple[Param, ...] = (
    Param(
        "window_ms",
        "int",
        10000,
        "length of the run (ms)",
        minimum=100,
        maximum=120_000,
        work="value",
    ),
    Param(
        "produce_per_s",
        "int",
        100,
        "jobs produced per second",
        minimum=1,
        maximum=2000,
        work="value",
    ),
    Param(
        "consume_per_s",
        "int",
        60,
        "jobs consumed per second (0: the consumer is stopped)",
        minimum=0,
        maximum=2000,
    ),
    Param(
        "capacity",
        "int",
        100,
        "the bounded queue's capacity",
        minimum=1,
        maximum=100_000,
    ),
    *variability_params(max_utilisation=200),
)


@dataclass(frozen=True)
class BackpressureParams(LabParams):
    """The lab's parameters, one typed field each."""

    window_ms: int
    produce_per_s: int
    consume_per_s: int
    capacity: int
    arrivals: str
    service_cv: float
    utilisations: list[int]
    variability_jobs: int
    seed: int
