"""The parameters of the cache-strategies lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``CacheStrategiesParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.jsnum import SEED_MAX

CATALOGUE_BOOKS = 60  # the lesson's book table holds 60 titles


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
        "write_ratio",
        "float",
        0.15,
        "share of operations that change a shelf count",
        minimum=0,
        maximum=1,
    ),
    Param(
        "hot_books",
        "int",
        12,
        "books the workload touches (the catalogue has 60)",
        minimum=1,
        maximum=CATALOGUE_BOOKS,
    ),
    Param(
        "flush_every",
        "int",
        20,
        "write-behind flushes after this many writes",
        minimum=1,
        maximum=200_000,
    ),
)


@dataclass(frozen=True)
class CacheStrategiesParams(LabParams):
    """The lab's parameters, one typed field each."""

    ops: int
    seed: int
    write_ratio: float
    hot_books: int
    flush_every: int
