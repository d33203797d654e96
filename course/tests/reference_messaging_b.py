"""Independent re-implementations of the publish-subscribe and streams labs.

Nothing here imports ``course/labs``, and the shape is different on purpose: where the
labs run a topic with queues and a log in real files, these count. A subscription's
queue is one integer that each round grows by what is published and shrinks by what
the budget pays for; copies follow from a ``Counter`` of types; byte counts come from
a hand-written serializer; retention is offset arithmetic.
"""

from __future__ import annotations

import math
from collections import Counter

Row = list[object]

# --- publish-subscribe ---------------------------------------------------------------

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


# --- streams-vs-queues ---------------------------------------------------------------

# (type, loan or None, book, member) of the six events
STREAM_EVENTS: list[tuple[str, int | None, int, int]] = [
    ("loan_issued", 1, 1, 1),
    ("loan_issued", 2, 2, 2),
    ("return_received", 1, 1, 1),
    ("loan_issued", 3, 3, 3),
    ("reservation_opened", None, 1, 2),
    ("return_received", 2, 2, 2),
]
SUBSCRIPTIONS = 3


def _compact(kind: str, loan: int | None, book: int, member: int) -> str:
    fields = [f'"type":"{kind}"']
    if loan is not None:
        fields.append(f'"loanId":{loan}')
    fields += [f'"bookId":{book}', f'"memberId":{member}']
    return "{" + ",".join(fields) + "}"


def storage() -> list[Row]:
    one = sum(len((_compact(*e) + "\n").encode()) for e in STREAM_EVENTS)
    return [["single log", 1, one], ["subscription copy", SUBSCRIPTIONS, 3 * one]]


def offsets() -> list[Row]:
    length = len(STREAM_EVENTS)
    rates = {"notification": 6, "stock-summary": 4, "report": 1}
    return [[name, min(rate, length)] for name, rate in rates.items()]


def replay() -> list[Row]:
    written = 6
    # acknowledgement deletes, so the queue has nothing left; the log still has all
    return [["queue", written, written, 0], ["stream", written, written, written]]


def retention(keep: int) -> list[Row]:
    events, report_at = 10, 2
    gone = events - keep if keep < events else 0
    return [[gone, gone, gone - report_at]]


def retention_reads(keep: int) -> list[Row]:
    events, report_at, notification_at = 10, 2, 10
    first_kept = max(0, events - keep)
    after_report: list[object] = (
        [None, "trimmed"]
        if report_at < first_kept
        else [events - report_at, "readable"]
    )
    return [
        ["before trim", "report", report_at, events - report_at, "readable"],
        ["after trim", "notification", notification_at, 0, "readable"],
        ["after trim", "report", report_at, *after_report],
    ]
