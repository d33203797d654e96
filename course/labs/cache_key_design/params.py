"""The parameters of the cache-key-design lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``CacheKeyDesignParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "requests",
        "int",
        400,
        "list requests in the cardinality stream",
        minimum=0,
        maximum=100_000,
        work="value",
    ),
)


@dataclass(frozen=True)
class CacheKeyDesignParams(LabParams):
    """The lab's parameters, one typed field each."""

    requests: int
