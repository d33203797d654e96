"""Counts over time for the operations history: deliveries done, letters gone dead,
and the backlog per subscription.

Each per-minute count reads one range of an indexed timestamp (``delivery_done_at``,
``deadletter_last_failed``), so its cost follows the rows in the range, never the
size of the log. The history sampler asks for the last few minutes only.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import Count, Q
from django.db.models.functions import TruncMinute

from messaging.models import DeadLetter, Delivery
from messaging.registry import SUBSCRIPTIONS

__all__ = [
    "SubscriptionBacklog",
    "dead_letters_per_minute",
    "deliveries_done_per_minute",
    "subscription_backlog",
]

UTC = datetime.UTC


def _minute(at: datetime.datetime) -> int:
    return int(at.timestamp() // 60)


def deliveries_done_per_minute(
    *, start: datetime.datetime, end: datetime.datetime
) -> dict[tuple[str, int], int]:
    """Return ``{(subscription, minute since the epoch): deliveries done}`` for
    deliveries whose ``done_at`` falls in ``[start, end)``."""
    rows = (
        Delivery.objects.filter(done_at__gte=start, done_at__lt=end)
        .order_by()
        .annotate(minute=TruncMinute("done_at", tzinfo=UTC))
        .values("subscription", "minute")
        .annotate(count=Count("id"))
    )
    return {(row["subscription"], _minute(row["minute"])): row["count"] for row in rows}


def dead_letters_per_minute(
    *, start: datetime.datetime, end: datetime.datetime
) -> dict[tuple[str, int], int]:
    """Return ``{(subscription, minute): letters}`` for letters that went dead (for
    the last time: a redriven letter that dies again moves) in ``[start, end)``."""
    rows = (
        DeadLetter.objects.filter(last_failed_at__gte=start, last_failed_at__lt=end)
        .order_by()
        .annotate(minute=TruncMinute("last_failed_at", tzinfo=UTC))
        .values("subscription", "minute")
        .annotate(count=Count("id"))
    )
    return {(row["subscription"], _minute(row["minute"])): row["count"] for row in rows}


@dataclass(frozen=True)
class SubscriptionBacklog:
    name: str
    pending: int  # waiting for a worker, due or backing off
    due: int  # pending and due now


def subscription_backlog(*, now: datetime.datetime) -> list[SubscriptionBacklog]:
    """Return pending and due deliveries of every registered subscription.

    Only pending rows are read (unlike ``subscription_counts``, which also counts the
    dead ones over the whole table), so the cost follows the backlog.
    """
    rows = (
        Delivery.objects.filter(status=Delivery.Status.PENDING)
        .order_by()
        .values("subscription")
        .annotate(
            pending=Count("id"),
            due=Count("id", filter=Q(available_at__lte=now)),
        )
    )
    found = {row["subscription"]: row for row in rows}
    names = list(SUBSCRIPTIONS) + sorted(set(found) - set(SUBSCRIPTIONS))
    return [
        SubscriptionBacklog(
            name=name,
            pending=found.get(name, {}).get("pending", 0),
            due=found.get(name, {}).get("due", 0),
        )
        for name in names
    ]
