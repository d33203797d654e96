"""Ordered subscriptions: deliveries split by key into partitions, one worker each.

A subscription declared with ``partitions=N`` gets, at relay time, the partition of
each copy (``policies.partition_of(message.key, N)``). Its deliveries are never in
the ordinary batches: a worker first takes a partition's lease (a row per partition,
claimed by compare-and-set, expiring so a dead worker's partition is taken over),
then works through that partition's deliveries strictly in offset order. Every
message of one key is in one partition, so a key's messages are applied in the order
they were published, while N partitions run on up to N workers at once.

Head-of-line blocking is the price, on purpose: while the oldest pending delivery of
a partition waits for its retry, the partition waits with it (skipping ahead would
apply a later change of the same key first). A head that keeps failing goes to the
dead letters after its attempts, exactly as in the unordered path, and the partition
flows again. Each head is claimed like any delivery (attempt counted at claim time,
with a lease), so a poison head that kills workers is isolated too.
"""

from __future__ import annotations

import datetime
import logging

from django.db.models import Count, F, Q
from django.utils import timezone

from messaging.models import Delivery, PartitionLease
from messaging.registry import SUBSCRIPTIONS, Subscription
from messaging.services.claim import lease_length
from messaging.services.process import Outcome, after_batch_run, delivery_process

log = logging.getLogger("messaging")

# Deliveries one partition processes per turn before the worker moves on, so one
# busy partition cannot keep a worker from the others for a whole drain.
PARTITION_TURN = 50


def partitioned_subscriptions(lane: str | None = None) -> list[Subscription]:
    return [
        s
        for s in SUBSCRIPTIONS.values()
        if s.partitions > 0 and (lane is None or s.lane == lane)
    ]


def _ensure_leases(subscription: Subscription) -> None:
    """Create the subscription's missing lease rows (a read when none is missing)."""
    have = PartitionLease.objects.filter(subscription=subscription.name).count()
    if have >= subscription.partitions:
        return
    PartitionLease.objects.bulk_create(
        [
            PartitionLease(subscription=subscription.name, partition=p)
            for p in range(subscription.partitions)
        ],
        ignore_conflicts=True,
    )


def _head(subscription: str, partition: int) -> Delivery | None:
    return (
        Delivery.objects.filter(
            subscription=subscription,
            partition=partition,
            status=Delivery.Status.PENDING,
        )
        .select_related("message")
        .order_by("message_id")
        .first()
    )


def _head_ready(head: Delivery | None, now: datetime.datetime) -> bool:
    """Whether the partition's oldest pending delivery may be tried now."""
    if head is None or head.available_at > now:
        return False
    return head.leased_until is None or head.leased_until < now


def _lease_free(now: datetime.datetime) -> Q:
    return Q(leased_until__isnull=True) | Q(leased_until__lt=now)


def partition_work(now: datetime.datetime, *, lane: str = "main") -> bool:
    """Return whether some partition of ``lane`` has a head ready and a free lease."""
    for subscription in partitioned_subscriptions(lane):
        _ensure_leases(subscription)
        free = PartitionLease.objects.filter(
            _lease_free(now), subscription=subscription.name
        ).values_list("partition", flat=True)
        if any(_head_ready(_head(subscription.name, p), now) for p in free):
            return True
    return False


def partitions_drain(
    *, owner: str, lane: str, deadline: datetime.datetime
) -> list[Outcome]:
    """Give each free partition of ``lane`` with a ready head a turn."""
    outcomes: list[Outcome] = []
    for subscription in partitioned_subscriptions(lane):
        _ensure_leases(subscription)
        for partition in range(subscription.partitions):
            if timezone.now() >= deadline:
                return outcomes
            if not _head_ready(_head(subscription.name, partition), timezone.now()):
                continue
            if not _lease_take(subscription, partition, owner):
                continue
            try:
                outcomes += _turn(subscription, partition, owner, deadline)
            finally:
                _lease_release(subscription.name, partition, owner)
        after_batch_run({subscription.name})
    return outcomes


def _lease_length(subscription: Subscription) -> datetime.timedelta:
    return lease_length(subscription.name)


def _lease_take(subscription: Subscription, partition: int, owner: str) -> bool:
    now = timezone.now()
    won = PartitionLease.objects.filter(
        _lease_free(now), subscription=subscription.name, partition=partition
    ).update(owner=owner, leased_until=now + _lease_length(subscription))
    return won == 1


def _lease_release(subscription: str, partition: int, owner: str) -> None:
    # Owner-checked: a worker whose lease ran out must not free its successor's.
    PartitionLease.objects.filter(
        subscription=subscription, partition=partition, owner=owner
    ).update(owner="", leased_until=None)


def _turn(
    subscription: Subscription,
    partition: int,
    owner: str,
    deadline: datetime.datetime,
) -> list[Outcome]:
    """Process the partition's deliveries in offset order until one must wait."""
    outcomes: list[Outcome] = []
    for _ in range(PARTITION_TURN):
        now = timezone.now()
        head = _head(subscription.name, partition)
        if now >= deadline or not _head_ready(head, now):
            break
        assert head is not None
        if not _claim_head(head, owner, now + _lease_length(subscription)):
            break
        outcome = delivery_process(head, owner=owner)
        outcomes.append(outcome)
        renewed = PartitionLease.objects.filter(
            subscription=subscription.name, partition=partition, owner=owner
        ).update(
            leased_until=timezone.now() + _lease_length(subscription),
            processed=F("processed") + 1,
        )
        if not renewed:
            log.warning("lost the lease of %s[%s]", subscription.name, partition)
            break
        if outcome.result in ("retry", "lost_lease"):
            break  # the head waits for its retry, and the partition with it
    return outcomes


def _claim_head(head: Delivery, owner: str, lease_until: datetime.datetime) -> bool:
    """Count the attempt and lease the head, as the unordered claim does."""
    now = timezone.now()
    won = Delivery.objects.filter(
        _lease_free(now),
        pk=head.pk,
        attempts=head.attempts,
        status=Delivery.Status.PENDING,
    ).update(attempts=F("attempts") + 1, lease_owner=owner, leased_until=lease_until)
    if won != 1:
        return False
    head.attempts += 1
    head.lease_owner = owner
    head.leased_until = lease_until
    return True


def partition_loads(subscription: str) -> list[int]:
    """Return each partition's pending deliveries, in partition order."""
    spec = SUBSCRIPTIONS[subscription]
    counts = dict.fromkeys(range(spec.partitions), 0)
    pending = (
        Delivery.objects.filter(
            subscription=subscription,
            status=Delivery.Status.PENDING,
            partition__isnull=False,
        )
        .values("partition")
        .annotate(n=Count("id"))
    )
    for row in pending:
        counts[row["partition"]] = row["n"]
    return [counts[p] for p in sorted(counts)]
