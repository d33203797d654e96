"""The parameters of the cache-metrics lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``CacheMetricsParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.jsnum import SEED_MAX

PARAMS: tuple[Param, ...] = (
    Param(
        "requests",
        "int",
        2000,
        "requests in each workload",
        minimum=0,
        maximum=200_000,
        work="value",
    ),
    Param("seed", "int", 20250729, "generator seed", minimum=0, maximum=SEED_MAX),
    Param(
        "capacities",
        "int_list",
        [4, 8, 16, 32, 64, 128],
        "cache sizes to compare, one row each (0: no cache; none: no rows)",
        minimum=0,
        min_items=0,
        maximum=1_000_000,
        work="count",
    ),
    Param(
        "breakdown_capacity",
        "int",
        64,
        "cache size of the namespace breakdown (0: no cache)",
        minimum=0,
        maximum=1_000_000,
    ),
)


@dataclass(frozen=True)
class CacheMetricsParams(LabParams):
    """The lab's parameters, one typed field each."""

    requests: int
    seed: int
    capacities: list[int]
    breakdown_capacity: int
