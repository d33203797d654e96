"""An independent re-implementation of the publish-subscribe lab.

Nothing here imports ``course/labs``, and the shape is different on purpose: where the
lab runs a topic with queues, this counts. A subscription's queue is one integer that
each round grows by what is published and shrinks by what the budget pays for;
copies follow from a ``Counter`` of types.
"""

from __future__ import annotations

import math
from collections import Counter

from course.tests.labs.reference import Row

FAN_OUT_NAMES = ["notification", "stock-summary", "report", "search-index"]


FAN_OUT_PUBLISHES = 4


def fan_out() -> list[Row]:
    rows: list[Row] = []
    for subscribers in range(1, len(FAN_OUT_NAMES) + 1):
        # a drain with 1000 units pays for every copy each one-unit subscriber holds
        copies = subscribers * FAN_OUT_PUBLISHES
        rows.append([subscribers, FAN_OUT_PUBLISHES, copies, copies])
    return rows


def _per_round(budget: int, cost: int) -> float:
    """How many messages ``budget`` units pay for at ``cost`` each (all when free)."""
    return math.inf if cost == 0 else budget // cost


def slow_subscriber(
    rounds: int, per_round: int, budget: int, slow_duration: int
) -> tuple[list[Row], list[Row]]:
    costs = [1, 1, slow_duration]
    backlog = [0, 0, 0]
    done = [0, 0, 0]
    shares: list[Row] = []
    pending: list[Row] = []
    for r in range(1, rounds + 1):
        for k, cost in enumerate(costs):
            waiting = backlog[k] + per_round
            served = int(min(waiting, _per_round(budget, cost)))
            done[k] += served
            backlog[k] = waiting - served
        shares.append([r, *(f"{d}/{b}" for d, b in zip(done, backlog, strict=True))])
        pending.append([r, *backlog])
    return shares, pending


# the eight published types, spelled by where each first appears
_KINDS = ["loan_issued", "return_received", "member_registered", "branch_added"]


FILTER_STREAM = [_KINDS[i] for i in (0, 1, 2, 0, 3, 1, 2, 0)]


FILTER_WANTS = [
    {"loan_issued", "return_received"},
    {"loan_issued", "return_received", "branch_added"},
    {"loan_issued"},
]


def filter_table() -> list[Row]:
    seen = Counter(FILTER_STREAM)
    total = len(FILTER_STREAM)
    everything = [total] * len(FILTER_WANTS)
    wanted = [sum(seen[kind] for kind in wants) for wants in FILTER_WANTS]
    return [
        ["off", total, sum(everything), *everything],
        ["on", total, sum(wanted), *wanted],
    ]


def late_subscriber() -> list[Row]:
    early, late = 3, 2  # search-index exists only for the last two
    return [[early + late, early]]
