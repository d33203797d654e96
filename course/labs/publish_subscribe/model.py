"""The model part of the publish-subscribe lab: an in-memory topic with one delivery
queue per subscription and the four experiments on it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from course.labs.harness.base import Cell, Progress, Tables, table
from course.labs.publish_subscribe.params import PublishSubscribeParams

LOAN_ISSUED = "loan_issued"
# A budget no fixed experiment below can exhaust: "process everything that is queued".
DRAIN_BUDGET = 1000

NOTIFICATION = "notification"
STOCK_SUMMARY = "stock-summary"
REPORT = "report"
SEARCH_INDEX = "search-index"
# The fan-out run adds subscribers in this order, one more per row.
FAN_OUT_SUBSCRIBERS = (NOTIFICATION, STOCK_SUMMARY, REPORT, SEARCH_INDEX)
FAN_OUT_EVENTS = 4
# The three subscriptions of the slow-subscriber and filter runs, as table columns.
COLUMNS = {
    NOTIFICATION: "notification",
    STOCK_SUMMARY: "stock_summary",
    REPORT: "report",
}
FAST_COST = 1

# The filter run publishes these types, one letter each, in this order; and each
# subscription names the types it wants.
_TYPE_BY_LETTER = {
    "L": "loan_issued",
    "R": "return_received",
    "M": "member_registered",
    "B": "branch_added",
}
MIXED_TYPES = tuple(_TYPE_BY_LETTER[letter] for letter in "LRMLBRML")
WANTED_TYPES: dict[str, frozenset[str]] = {
    NOTIFICATION: frozenset({"loan_issued", "return_received"}),
    STOCK_SUMMARY: frozenset({"loan_issued", "return_received", "branch_added"}),
    REPORT: frozenset({"loan_issued"}),
}

LATE_BEFORE_JOINING = 3  # events published before search-index subscribes
LATE_AFTER_JOINING = 2


@dataclass(frozen=True)
class Event:
    id: int
    kind: str
    body: dict[str, int]


def _take_all(kind: str) -> bool:
    return True


@dataclass
class Subscription:
    """One interested party's own delivery queue on the topic."""

    name: str
    cost: int  # time units one message takes; 0 means free
    accepts: Callable[[str], bool]
    queue: deque[Event] = field(default_factory=deque)
    processed: int = 0
    rejected: int = 0


class Topic:
    """A named channel: the producer publishes once, the topic copies per subscriber.

    Subscriptions are kept in subscription order (a dict), which is also the order
    in which ``advance`` serves them; since each one spends its own budget the order
    does not change any count.
    """

    def __init__(self) -> None:
        self._subscriptions: dict[str, Subscription] = {}
        self.published = 0
        self.copies = 0
        self.delivered = 0

    def subscribe(
        self,
        name: str,
        *,
        cost: int = FAST_COST,
        accepts: Callable[[str], bool] = _take_all,
    ) -> None:
        # Only messages published from now on reach it: a topic keeps no history.
        self._subscriptions[name] = Subscription(name, cost, accepts)

    def publish(self, kind: str, body: dict[str, int]) -> int:
        """Copy the message into every subscription that exists and wants it."""
        self.published += 1
        event = Event(self.published, kind, body)
        for subscription in self._subscriptions.values():
            # The filter runs here, on the publishing side: no copy, no later discard.
            if not subscription.accepts(kind):
                subscription.rejected += 1
                continue
            subscription.queue.append(event)
            self.copies += 1
        return event.id

    def advance(self, budget: int) -> None:
        """Give every subscription ``budget`` time units to work its own queue."""
        for subscription in self._subscriptions.values():
            left = budget
            while subscription.queue and left >= subscription.cost:
                subscription.queue.popleft()
                subscription.processed += 1
                self.delivered += 1
                left -= subscription.cost

    def pending(self, name: str) -> int:
        return len(self._subscriptions[name].queue)

    def processed(self, name: str) -> int:
        return self._subscriptions[name].processed


def fan_out_rows() -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for count in range(1, len(FAN_OUT_SUBSCRIBERS) + 1):
        topic = Topic()
        for name in FAN_OUT_SUBSCRIBERS[:count]:
            topic.subscribe(name)
        for loan in range(1, FAN_OUT_EVENTS + 1):
            topic.publish(LOAN_ISSUED, {"loanId": loan})
        topic.advance(DRAIN_BUDGET)
        rows.append([count, topic.published, topic.copies, topic.delivered])
    return rows


def slow_subscriber_rows(
    *, rounds: int, per_round: int, budget: int, slow_duration: int
) -> tuple[list[list[Cell]], list[list[Cell]]]:
    """Return (processed/pending rows, pending-count rows), one of each per round."""
    topic = Topic()
    topic.subscribe(NOTIFICATION, cost=FAST_COST)
    topic.subscribe(STOCK_SUMMARY, cost=FAST_COST)
    topic.subscribe(REPORT, cost=slow_duration)
    progress_rows: list[list[Cell]] = []
    backlog_rows: list[list[Cell]] = []
    for round_no in range(1, rounds + 1):
        for i in range(per_round):
            topic.publish(LOAN_ISSUED, {"round": round_no, "i": i})
        topic.advance(budget)
        shares = [f"{topic.processed(name)}/{topic.pending(name)}" for name in COLUMNS]
        pending = [topic.pending(name) for name in COLUMNS]
        progress_rows.append([round_no, *shares])
        backlog_rows.append([round_no, *pending])
    return progress_rows, backlog_rows


def _wants(kinds: frozenset[str]) -> Callable[[str], bool]:
    return kinds.__contains__


def filter_row(*, filtered: bool) -> list[Cell]:
    topic = Topic()
    for name, kinds in WANTED_TYPES.items():
        topic.subscribe(name, accepts=_wants(kinds) if filtered else _take_all)
    for kind in MIXED_TYPES:
        topic.publish(kind, {})
    topic.advance(DRAIN_BUDGET)
    label = "on" if filtered else "off"
    counts: list[Cell] = [topic.processed(name) for name in COLUMNS]
    return [label, topic.published, topic.copies, *counts]


def _publish_loans(topic: Topic, loans: Iterable[int]) -> None:
    for loan in loans:
        topic.publish(LOAN_ISSUED, {"loanId": loan})


def late_subscriber() -> tuple[list[Cell], list[list[Cell]]]:
    """Return (the contract's row, processed counts after each stage)."""
    topic = Topic()
    topic.subscribe(NOTIFICATION)
    topic.subscribe(STOCK_SUMMARY)
    _publish_loans(topic, range(1, LATE_BEFORE_JOINING + 1))
    topic.advance(DRAIN_BUDGET)
    steps: list[list[Cell]] = [
        [
            "before search-index subscribes",
            topic.published,
            topic.processed(NOTIFICATION),
            topic.processed(STOCK_SUMMARY),
            None,
        ]
    ]
    topic.subscribe(SEARCH_INDEX)
    total = LATE_BEFORE_JOINING + LATE_AFTER_JOINING
    _publish_loans(topic, range(LATE_BEFORE_JOINING + 1, total + 1))
    topic.advance(DRAIN_BUDGET)
    late_seen = topic.processed(SEARCH_INDEX)
    steps.append(
        [
            "after search-index subscribes",
            topic.published,
            topic.processed(NOTIFICATION),
            topic.processed(STOCK_SUMMARY),
            late_seen,
        ]
    )
    return [topic.published, topic.published - late_seen], steps


def model(params: PublishSubscribeParams, progress: Progress) -> Tables:
    progress(0.05, "fan_out: one publish call, a copy per subscriber")
    fan_out = fan_out_rows()
    progress(0.2, "slow_subscriber: a slow subscription keeps its own backlog")
    slow, backlog = slow_subscriber_rows(
        rounds=params.rounds,
        per_round=params.per_round,
        budget=params.budget,
        slow_duration=params.slow_duration,
    )
    progress(0.8, "filter: copies a type filter never makes")
    filters = [filter_row(filtered=False), filter_row(filtered=True)]
    progress(0.9, "late_subscriber: a new subscription sees no history")
    late, late_steps = late_subscriber()
    subscriber_columns = list(COLUMNS.values())
    return {
        "fan_out": table(
            ["subscribers", "publish_calls", "copies", "delivered"], fan_out
        ),
        "slow_subscriber": table(["round", *subscriber_columns], slow),
        "filter": table(
            ["filter", "published", "copies", *subscriber_columns], filters
        ),
        "late_subscriber": table(["published", "missed_by_late"], [late]),
        "backlog": table(["round", *subscriber_columns], backlog),
        "late_subscriber_steps": table(
            ["stage", "published", *subscriber_columns[:2], "search_index"],
            late_steps,
        ),
    }
