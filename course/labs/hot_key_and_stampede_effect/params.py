"""The parameters of the hot-key-and-stampede-effect lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``HotKeyParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param(
        "requests",
        "int",
        100,
        "readers arriving at the same instant",
        minimum=0,
        maximum=10_000,
        work="value",
    ),
    Param(
        "origin_delay_ms",
        "int",
        30,
        "time the origin takes to answer (virtual)",
        minimum=0,
        maximum=3_600_000,
    ),
    Param(
        "keys",
        "int",
        200,
        "keys loaded in the same step",
        minimum=1,
        maximum=100_000,
    ),
    Param(
        "lifetime",
        "int",
        100,
        "lifetime in steps (0: each entry expires in the step it was loaded)",
        minimum=0,
        maximum=1_000_000_000,
    ),
    Param(
        "jitter",
        "int",
        40,
        "key-derived lifetime deviation, in steps (0: none)",
        minimum=0,
        maximum=1_000_000_000,
    ),
    Param(
        "shard_requests",
        "int",
        1000,
        "requests routed to the shards (0: no shard load)",
        minimum=0,
        maximum=200_000,
        work="value",
    ),
    Param("shards", "int", 4, "cache nodes", minimum=1, maximum=32),
    Param(
        "copies",
        "int_list",
        [4, 8],
        "copies of the hot key, one row each (none: the single key only)",
        minimum=1,
        min_items=0,
        maximum=100_000,
        work="count",
    ),
)


@dataclass(frozen=True)
class HotKeyParams(LabParams):
    """The lab's parameters, one typed field each."""

    requests: int
    origin_delay_ms: int
    keys: int
    lifetime: int
    jitter: int
    shard_requests: int
    shards: int
    copies: list[int]
