"""The parameters of the worker-processes lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``WorkerProcessesParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.queueing import variability_params

PARAMS: tuple[Param, ...] = (
    Param(
        "jobs",
        "int",
        12,
        "equal jobs in the queue (0: an empty queue, no slices)",
        minimum=0,
        maximum=500,
        work="value",
    ),
    Param("job_ms", "int", 100, "how long one job waits (ms)", minimum=1, maximum=5000),
    Param(
        "workers",
        "int_list",
        [1, 2, 4],
        "pool sizes to compare, one row each (none: no pool rows)",
        minimum=1,
        maximum=16,
        min_items=0,
        max_items=6,
        work="count",
    ),
    *variability_params(max_utilisation=99),
)


@dataclass(frozen=True)
class WorkerProcessesParams(LabParams):
    """The lab's parameters, one typed field each."""

    jobs: int
    job_ms: int
    workers: list[int]
    arrivals: str
    service_cv: float
    utilisations: list[int]
    variability_jobs: int
    seed: int
