"""The index page's view of the spine: subscription counts, outbox lag, dead letters."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import Count, Max, Min, Q
from django.utils import timezone

from messaging.models import DeadLetter, Delivery, OutboxMessage
from messaging.registry import SUBSCRIPTIONS
from messaging.selectors.dead_letters import worker_deaths


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
    signature: str  # the letters' error with its values taken out (the key)
    example: str  # one letter's error as it was, values and all
    count: int
    oldest: datetime.timedelta  # since the oldest letter of the cluster went dead
    # Letters of the cluster whose earlier attempts killed their worker.
    killed_workers: int = 0


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
        oldest_unrelayed=age_since(unrelayed["oldest"], now),
        oldest_due=age_since(oldest_due, now),
    )


def dead_letter_open_count() -> int:
    """Return how many dead letters wait for an operator (not redriven, not
    discarded)."""
    return DeadLetter.objects.filter(
        redriven_at__isnull=True, discarded_at__isnull=True
    ).count()


def dead_letter_clusters(
    *, now: datetime.datetime | None = None
) -> list[DeadLetterCluster]:
    """Group open dead letters by subscription and error, biggest cluster first.

    Letters that failed the same way usually share one cause, so one fix and one
    redrive clear the whole cluster. "The same way" is the error's signature
    (``messaging.signatures``): "member 7 not found" and "member 12 not found" are
    one cluster.
    """
    now = now or timezone.now()
    rows = (
        DeadLetter.objects.filter(redriven_at__isnull=True, discarded_at__isnull=True)
        .annotate(worker_deaths=worker_deaths())
        .order_by()
        .values("subscription", "error_signature")
        .annotate(
            count=Count("id"),
            oldest=Min("last_failed_at"),
            example=Max("last_error"),
            killed_workers=Count("id", filter=Q(worker_deaths__gt=0)),
        )
        .order_by("-count", "oldest", "subscription", "error_signature")
    )
    return [
        DeadLetterCluster(
            subscription=row["subscription"],
            signature=row["error_signature"],
            example=row["example"],
            count=row["count"],
            oldest=max(now - row["oldest"], datetime.timedelta(0)),
            killed_workers=row["killed_workers"],
        )
        for row in rows
    ]


def messaging_overview(*, now: datetime.datetime | None = None) -> MessagingOverview:
    """Return what the admin index shows about the spine, measured at one instant."""
    now = now or timezone.now()
    return MessagingOverview(
        open_dead_letters=dead_letter_open_count(),
        subscriptions=subscription_counts(now=now),
        lag=outbox_lag(now=now),
    )


def age_since(
    since: datetime.datetime | None, now: datetime.datetime
) -> datetime.timedelta | None:
    # Clock skew between processes can put ``since`` a moment after ``now``.
    return None if since is None else max(now - since, datetime.timedelta(0))
