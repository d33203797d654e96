"""The parameters of the load-shedding lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``LoadSheddingParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.queueing import variability_params

PARAMS: tuple[Param, ...] = (
    Param(
        "requests",
        "int",
        10,
        "requests sent at once (0: none, an empty table)",
        minimum=0,
        maximum=200,
        work="value",
    ),
    Param(
        "max_concurrent",
        "int",
        2,
        "jobs processed at once",
        minimum=1,
        maximum=100,
    ),
    Param(
        "max_queue",
        "int",
        2,
        "jobs that may wait (controlled)",
        minimum=0,
        maximum=1000,
    ),
    Param("job_ms", "int", 300, "duration of a job (ms)", minimum=1, maximum=5000),
    *variability_params(max_utilisation=200),
)


@dataclass(frozen=True)
class LoadSheddingParams(LabParams):
    """The lab's parameters, one typed field each."""

    requests: int
    max_concurrent: int
    max_queue: int
    job_ms: int
    arrivals: str
    service_cv: float
    utilisations: list[int]
    variability_jobs: int
    seed: int
