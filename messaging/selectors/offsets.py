"""Log offsets and pending-delivery groups shared by the depth selectors."""

from __future__ import annotations

from typing import Any

from django.db.models import Max, OuterRef, QuerySet, Subquery

from messaging.models import Delivery, LogRetention, OutboxMessage


def newest_offset() -> int:
    """Return the offset of the newest message in the log (0 for an empty log).

    A log trimmed to nothing still has a head: the offset just before its earliest.
    """
    newest = OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0
    return max(newest, _earliest_offset() - 1)


def _earliest_offset() -> int:
    row = LogRetention.objects.filter(pk=1).values_list("earliest_offset", flat=True)
    return row.first() or 1


def newest_offset_subquery() -> Subquery:
    return Subquery(OutboxMessage.objects.order_by("-id").values("id")[:1])


def pending_per(**outer: OuterRef) -> QuerySet[Delivery, dict[str, Any]]:
    """Return the pending deliveries matching ``outer``, one group per row."""
    rows: QuerySet[Delivery, dict[str, Any]] = (
        Delivery.objects.filter(status=Delivery.Status.PENDING, **outer)
        .order_by()
        .values(*outer)
    )
    return rows
