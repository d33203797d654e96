"""The parameters of the invalidation lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``InvalidationParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.jsnum import SEED_MAX

PARAMS: tuple[Param, ...] = (
    Param(
        "ops",
        "int",
        1200,
        "operations in the workload",
        minimum=0,
        maximum=200_000,
        work="value",
    ),
    Param("seed", "int", 20250729, "generator seed", minimum=0, maximum=SEED_MAX),
    Param(
        "lifetimes",
        "int_list",
        [10, 50, 200],
        "entry lifetimes in ticks, one time-based row each (none: no such rows)",
        minimum=0,
        maximum=1_000_000,
        min_items=0,
        max_items=8,
        work="count",
    ),
    Param(
        "delays",
        "int_list",
        [5, 25],
        "ticks between consumer runs, one event-based row each "
        "(1: every tick; none: no such rows)",
        minimum=1,
        maximum=1_000_000,
        min_items=0,
        max_items=8,
        work="count",
    ),
)


@dataclass(frozen=True)
class InvalidationParams(LabParams):
    """The lab's parameters, one typed field each."""

    ops: int
    seed: int
    lifetimes: list[int]
    delays: list[int]
