"""Partition leases with their pending load, and the loads of every partition."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Min, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from messaging.models import Delivery, PartitionLease
from messaging.registry import SUBSCRIPTIONS
from messaging.selectors.offsets import pending_per
from messaging.services.partitions import partition_loads


def partition_lease_rows(
    queryset: QuerySet[PartitionLease],
) -> QuerySet[PartitionLease]:
    """Annotate partition leases with ``load``, ``head_offset`` and the hot key.

    - ``load``: the partition's pending deliveries (what ``partition_loads`` counts).
    - ``head_offset``: its oldest pending message, the one the partition waits on.
    - ``hot_key`` / ``hot_key_load``: the message key (the book id) with the most
      pending deliveries in the partition, so a hot book shows by name.
    """
    pending = pending_per(
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
