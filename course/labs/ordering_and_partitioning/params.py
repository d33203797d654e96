"""The parameters of the ordering-and-partitioning lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``OrderingParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.jsnum import SEED_MAX


def counts_param(name: str, default: list[int], what: str) -> Param:
    return Param(
        name,
        "int_list",
        default,
        f"{what}, one row each (none: no rows)",
        minimum=1,
        maximum=100,
        min_items=0,
        max_items=12,
        work="count",
    )


PARAMS: tuple[Param, ...] = (
    Param(
        "events",
        "int",
        24,
        "loan events in the main workload",
        minimum=0,
        maximum=20_000,
        work="value",
    ),
    Param(
        "seed",
        "int",
        20250720,
        "seed of the course's generator for the main workload",
        minimum=0,
        maximum=SEED_MAX,
    ),
    Param(
        "books",
        "int",
        6,
        "distinct books the main workload draws from",
        minimum=1,
        maximum=10_000,
    ),
    counts_param("workers", [1, 2, 3, 4], "worker counts with no partitioning"),
    counts_param("partitions", [1, 2, 3, 4, 6], "partition counts (key: book id)"),
    Param(
        "hot_events",
        "int",
        30,
        "events in the hot-key workload (book 3 is hot)",
        minimum=0,
        maximum=20_000,
        work="value",
    ),
    Param(
        "hot_seed",
        "int",
        7,
        "seed of the course's generator for the hot-key workload",
        minimum=0,
        maximum=SEED_MAX,
    ),
    counts_param("hot_partitions", [1, 2, 4, 8], "partition counts for the hot key"),
)


@dataclass(frozen=True)
class OrderingParams(LabParams):
    """The lab's parameters, one typed field each."""

    events: int
    seed: int
    books: int
    workers: list[int]
    partitions: list[int]
    hot_events: int
    hot_seed: int
    hot_partitions: list[int]
