"""Subscription depth: pending deliveries, lag and the oldest pending age."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    Min,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from messaging.models import SubscriptionState
from messaging.selectors.offsets import newest_offset_subquery, pending_per
from messaging.selectors.overview import age_since


def subscription_depth_rows(
    queryset: QuerySet[SubscriptionState],
) -> QuerySet[SubscriptionState]:
    """Annotate subscriptions with ``depth``, ``lag`` and ``oldest_pending_at``.

    - ``depth``: its pending deliveries (due or backing off, leased or not).
    - ``oldest_pending_offset``: the offset of the oldest message it still owes.
    - ``lag``: how many offsets it is behind the head of the log, counting that
      oldest owed message: ``newest offset - oldest pending offset + 1``, 0 when
      nothing is pending. Everything before its oldest pending delivery is done (or
      dead), so this is the gap a stream consumer at offset ``oldest - 1`` would
      have; it counts the messages of other types in between too, because a lag in
      offsets is what retention and the other consumers are measured in. Messages
      not relayed yet count for no subscription (they show as the outbox lag).
    - ``oldest_pending_at``: when that oldest owed message was published; the age
      shown is ``now`` minus this.

    One query: the counts are correlated subqueries over the
    ``delivery_sub_status`` index.
    """
    pending = pending_per(subscription=OuterRef("name"))
    oldest = Subquery(pending.annotate(m=Min("message_id")).values("m")[:1])
    return queryset.annotate(
        depth=Coalesce(
            Subquery(pending.annotate(n=Count("id")).values("n")[:1]), Value(0)
        ),
        oldest_pending_offset=oldest,
        oldest_pending_at=Subquery(
            pending.annotate(t=Min("message__created_at")).values("t")[:1]
        ),
        newest_offset=newest_offset_subquery(),
    ).annotate(
        lag=Case(
            When(oldest_pending_offset__isnull=True, then=Value(0)),
            default=F("newest_offset") - F("oldest_pending_offset") + 1,
            output_field=IntegerField(),
        )
    )


@dataclass(frozen=True)
class SubscriptionDepth:
    name: str
    active: bool
    starts_after: int
    depth: int
    lag: int
    oldest_pending_age: datetime.timedelta | None


def subscription_depths(
    *, now: datetime.datetime | None = None
) -> list[SubscriptionDepth]:
    """Return depth, lag and oldest pending age of every subscription with a state.

    See ``subscription_depth_rows`` for what each number means.
    """
    now = now or timezone.now()
    rows = subscription_depth_rows(SubscriptionState.objects.order_by("name"))
    return [
        SubscriptionDepth(
            name=row.name,
            active=row.active,
            starts_after=row.starts_after,
            depth=row.depth,  # type: ignore[attr-defined]
            lag=row.lag,  # type: ignore[attr-defined]
            oldest_pending_age=age_since(row.oldest_pending_at, now),  # type: ignore[attr-defined]
        )
        for row in rows
    ]
