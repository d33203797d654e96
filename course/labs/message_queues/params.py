"""The parameters of the message-queues lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``MessageQueuesParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.queueing import variability_params

PARAMS: tuple[Param, ...] = (
    Param(
        "visibility",
        "float",
        30.0,
        "visibility timeout, and how far the clock moves before consumer-2",
        minimum=0,
        exclusive_minimum=True,
        maximum=1e6,
    ),
    Param(
        "consumers",
        "int_list",
        [1, 2, 3],
        "consumer counts for the depth run, one row each "
        "(0: nobody consumes; none: no rows)",
        minimum=0,
        maximum=100,
        min_items=0,
        max_items=10,
        work="count",
    ),
    Param(
        "rounds",
        "int",
        6,
        "rounds in the depth run",
        minimum=1,
        maximum=500,
        work="value",
    ),
    Param("production", "int", 5, "jobs written per round", minimum=0, maximum=500),
    Param(
        "consumption_rate",
        "int",
        3,
        "jobs each consumer finishes per round",
        minimum=0,
        maximum=500,
    ),
    *variability_params(max_utilisation=150),
    Param(
        "variability_consumers",
        "int",
        1,
        "consumers sharing the queue in the variability run",
        minimum=1,
        maximum=16,
    ),
)


@dataclass(frozen=True)
class MessageQueuesParams(LabParams):
    """The lab's parameters, one typed field each."""

    visibility: float
    consumers: list[int]
    rounds: int
    production: int
    consumption_rate: int
    arrivals: str
    service_cv: float
    utilisations: list[int]
    variability_jobs: int
    seed: int
    variability_consumers: int
