"""Read-only queries about the messaging spine, for the operator's admin.

Every function that measures an age takes ``now`` so a page computes all its ages
against one instant and tests can pin it. The ``*_rows`` functions annotate an
admin's queryset, so its numbers are computed in the page's one query and its
columns can be sorted by them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from messaging.models import (
    DeadLetter,
    Delivery,
    LogRetention,
    OutboxMessage,
    PartitionLease,
    StreamConsumer,
    SubscriptionState,
)
from messaging.partitions import partition_loads
from messaging.registry import STREAM_CONSUMERS, SUBSCRIPTIONS


@dataclass(frozen=True)
class SubscriptionCounts:
    name: str
    pending: int  # waiting for a worker, due or backing off
    due: int  # pending and due now: what a drain would claim
    dead: int  # deliveries given up on (open or redriven letters alike)


@dataclass(frozen=True)
class OutboxLag:
    unrelayed: int
    # Age of the oldest message the relay has not copied into deliveries yet.
    oldest_unrelayed: datetime.timedelta | None
    # How long the oldest due delivery has been waiting for a worker.
    oldest_due: datetime.timedelta | None


@dataclass(frozen=True)
class DeadLetterCluster:
    subscription: str
    last_error: str
    count: int
    oldest: datetime.timedelta  # since the oldest letter of the cluster went dead


@dataclass(frozen=True)
class MessagingOverview:
    open_dead_letters: int
    subscriptions: list[SubscriptionCounts]
    lag: OutboxLag


def subscription_counts(
    *, now: datetime.datetime | None = None
) -> list[SubscriptionCounts]:
    """Return pending, due and dead counts for every registered subscription.

    Subscriptions without deliveries are listed with zeros; names found only in the
    data (a subscription since removed from the registry) are listed after them.
    """
    now = now or timezone.now()
    pending = Q(status=Delivery.Status.PENDING)
    rows = (
        Delivery.objects.order_by()
        .values("subscription")
        .annotate(
            pending=Count("id", filter=pending),
            # Leases are ignored on purpose: a leased delivery is due work in flight.
            due=Count("id", filter=pending & Q(available_at__lte=now)),
            dead=Count("id", filter=Q(status=Delivery.Status.DEAD)),
        )
    )
    found = {row["subscription"]: row for row in rows}
    names = list(SUBSCRIPTIONS) + sorted(set(found) - set(SUBSCRIPTIONS))
    return [
        SubscriptionCounts(
            name=name,
            pending=found.get(name, {}).get("pending", 0),
            due=found.get(name, {}).get("due", 0),
            dead=found.get(name, {}).get("dead", 0),
        )
        for name in names
    ]


def outbox_lag(*, now: datetime.datetime | None = None) -> OutboxLag:
    """Return how far the relay and the workers are behind."""
    now = now or timezone.now()
    unrelayed = OutboxMessage.objects.filter(relayed_at__isnull=True).aggregate(
        count=Count("id"), oldest=Min("created_at")
    )
    oldest_due = Delivery.objects.filter(
        status=Delivery.Status.PENDING, available_at__lte=now
    ).aggregate(oldest=Min("available_at"))["oldest"]
    return OutboxLag(
        unrelayed=unrelayed["count"],
        oldest_unrelayed=_age(unrelayed["oldest"], now),
        oldest_due=_age(oldest_due, now),
    )


def deadletter_open_count() -> int:
    """Return how many dead letters wait for an operator (not redriven)."""
    return DeadLetter.objects.filter(redriven_at__isnull=True).count()


def deadletter_clusters(
    *, now: datetime.datetime | None = None
) -> list[DeadLetterCluster]:
    """Group open dead letters by subscription and error, biggest cluster first.

    Letters that failed the same way usually share one cause, so one fix and one
    redrive clear the whole cluster.
    """
    now = now or timezone.now()
    rows = (
        DeadLetter.objects.filter(redriven_at__isnull=True)
        .order_by()
        .values("subscription", "last_error")
        .annotate(count=Count("id"), oldest=Min("last_failed_at"))
        .order_by("-count", "oldest", "subscription", "last_error")
    )
    return [
        DeadLetterCluster(
            subscription=row["subscription"],
            last_error=row["last_error"],
            count=row["count"],
            oldest=max(now - row["oldest"], datetime.timedelta(0)),
        )
        for row in rows
    ]


def messaging_overview(*, now: datetime.datetime | None = None) -> MessagingOverview:
    """Return what the admin index shows about the spine, measured at one instant."""
    now = now or timezone.now()
    return MessagingOverview(
        open_dead_letters=deadletter_open_count(),
        subscriptions=subscription_counts(now=now),
        lag=outbox_lag(now=now),
    )


def _age(
    since: datetime.datetime | None, now: datetime.datetime
) -> datetime.timedelta | None:
    # Clock skew between processes can put ``since`` a moment after ``now``.
    return None if since is None else max(now - since, datetime.timedelta(0))


# --- Depth: subscriptions, partitions, stream consumers ------------------------------


def newest_offset() -> int:
    """Return the offset of the newest message in the log (0 for an empty log).

    A log trimmed to nothing still has a head: the offset just before its earliest.
    """
    newest = OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0
    return max(newest, _earliest_offset() - 1)


def _earliest_offset() -> int:
    row = LogRetention.objects.filter(pk=1).values_list("earliest_offset", flat=True)
    return row.first() or 1


def _newest_subquery() -> Subquery:
    return Subquery(OutboxMessage.objects.order_by("-id").values("id")[:1])


def _pending_per(**outer: OuterRef) -> QuerySet[Delivery, dict[str, Any]]:
    """Return the pending deliveries matching ``outer``, one group per row."""
    rows: QuerySet[Delivery, dict[str, Any]] = (
        Delivery.objects.filter(status=Delivery.Status.PENDING, **outer)
        .order_by()
        .values(*outer)
    )
    return rows


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
    pending = _pending_per(subscription=OuterRef("name"))
    oldest = Subquery(pending.annotate(m=Min("message_id")).values("m")[:1])
    return queryset.annotate(
        depth=Coalesce(
            Subquery(pending.annotate(n=Count("id")).values("n")[:1]), Value(0)
        ),
        oldest_pending_offset=oldest,
        oldest_pending_at=Subquery(
            pending.annotate(t=Min("message__created_at")).values("t")[:1]
        ),
        newest_offset=_newest_subquery(),
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
            oldest_pending_age=_age(row.oldest_pending_at, now),  # type: ignore[attr-defined]
        )
        for row in rows
    ]


def partition_lease_rows(
    queryset: QuerySet[PartitionLease],
) -> QuerySet[PartitionLease]:
    """Annotate partition leases with ``load``, ``head_offset`` and the hot key.

    - ``load``: the partition's pending deliveries (what ``partition_loads`` counts).
    - ``head_offset``: its oldest pending message, the one the partition waits on.
    - ``hot_key`` / ``hot_key_load``: the message key (the book id) with the most
      pending deliveries in the partition, so a hot book shows by name.
    """
    pending = _pending_per(
        subscription=OuterRef("subscription"), partition=OuterRef("partition")
    )
    by_key = (
        Delivery.objects.filter(
            status=Delivery.Status.PENDING,
            subscription=OuterRef("subscription"),
            partition=OuterRef("partition"),
        )
        .order_by()
        .values("message__key")
        .annotate(n=Count("id"))
        .order_by("-n", "message__key")
    )
    return queryset.annotate(
        load=Coalesce(
            Subquery(pending.annotate(n=Count("id")).values("n")[:1]), Value(0)
        ),
        head_offset=Subquery(pending.annotate(m=Min("message_id")).values("m")[:1]),
        hot_key=Subquery(by_key.values("message__key")[:1]),
        hot_key_load=Subquery(by_key.values("n")[:1]),
    )


@dataclass(frozen=True)
class PartitionLoads:
    subscription: str
    loads: list[int]  # pending deliveries per partition, in partition order

    @property
    def total(self) -> int:
        return sum(self.loads)

    @property
    def peak(self) -> int:
        return max(self.loads, default=0)

    @property
    def hottest(self) -> int | None:
        """Return the partition with the most pending deliveries, if any is loaded."""
        if not self.total:
            return None
        return max(range(len(self.loads)), key=lambda p: (self.loads[p], -p))


def partitioned_loads() -> list[PartitionLoads]:
    """Return the loads of every partitioned subscription of the registry.

    Read from the deliveries, so partitions whose lease row no worker has created
    yet are counted too.
    """
    return [
        PartitionLoads(subscription=s.name, loads=partition_loads(s.name))
        for s in SUBSCRIPTIONS.values()
        if s.partitions > 0
    ]


def stream_consumer_rows(
    queryset: QuerySet[StreamConsumer],
) -> QuerySet[StreamConsumer]:
    """Annotate stream consumers with ``gap``: newest offset minus their offset.

    The offset is the last message a consumer applied, so ``gap`` is exactly the
    number of offsets it still has to read (0 when caught up).
    """
    return queryset.annotate(
        newest_offset=Coalesce(_newest_subquery(), Value(0))
    ).annotate(
        gap=Case(
            When(newest_offset__lt=F("offset"), then=Value(0)),
            default=F("newest_offset") - F("offset"),
            output_field=IntegerField(),
        )
    )


@dataclass(frozen=True)
class StreamOverview:
    newest_offset: int
    earliest_offset: int
    trimmed_total: int
    last_trim_at: datetime.datetime | None
    slowest: str | None  # the registered consumer with the lowest offset
    # slowest offset - (earliest offset - 1): how many kept messages the slowest
    # consumer has already read. 0: the next trim may cut it; below 0: it was cut
    # (its next message is gone). None when no consumer is registered.
    slowest_gap_to_earliest: int | None


def stream_overview() -> StreamOverview:
    """Return the log's retention state and the slowest consumer's distance to it.

    Registered consumers without a row yet count at offset 0, where the stream
    worker would create them.
    """
    retention = LogRetention.objects.filter(pk=1).first() or LogRetention()
    offsets = dict.fromkeys(STREAM_CONSUMERS, 0)
    offsets.update(
        StreamConsumer.objects.filter(name__in=list(offsets)).values_list(
            "name", "offset"
        )
    )
    slowest = min(offsets, key=lambda n: (offsets[n], n)) if offsets else None
    earliest = retention.earliest_offset
    return StreamOverview(
        newest_offset=newest_offset(),
        earliest_offset=earliest,
        trimmed_total=retention.trimmed_total,
        last_trim_at=retention.last_trim_at,
        slowest=slowest,
        slowest_gap_to_earliest=(
            None if slowest is None else offsets[slowest] - (earliest - 1)
        ),
    )
