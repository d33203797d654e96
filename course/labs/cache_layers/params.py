"""The parameters of the cache-layers lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``CacheLayersParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param
from course.labs.harness.jsnum import SEED_MAX

PARAMS: tuple[Param, ...] = (
    Param(
        "requests",
        "int",
        600,
        "requests in each stream",
        minimum=0,
        maximum=200_000,
        work="value",
    ),
    Param(
        "users",
        "int",
        40,
        "distinct users in the chain stream",
        minimum=1,
        maximum=100_000,
    ),
    Param("seed", "int", 20250729, "generator seed", minimum=0, maximum=SEED_MAX),
    Param(
        "client_capacity",
        "int",
        4,
        "entries per user's client cache (0: the layer is off)",
        minimum=0,
        maximum=100_000,
    ),
    Param(
        "edge_capacity",
        "int",
        10,
        "entries in the shared edge cache (0: the layer is off)",
        minimum=0,
        maximum=100_000,
    ),
    Param(
        "server_capacity",
        "int",
        200,
        "entries in the server cache (0: the layer is off)",
        minimum=0,
        maximum=100_000,
    ),
)


@dataclass(frozen=True)
class CacheLayersParams(LabParams):
    """The lab's parameters, one typed field each."""

    requests: int
    users: int
    seed: int
    client_capacity: int
    edge_capacity: int
    server_capacity: int
