"""Publish into the outbox, and relay new messages into their deliveries.

A message exists iff the change it describes committed (``outbox_publish`` runs in
the caller's transaction); every accepting subscription gets exactly one delivery
(unique constraint; a second relay of the same message inserts nothing).
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from messaging import dispatch
from messaging.models import Delivery, OutboxMessage
from messaging.policies import partition_of
from messaging.registry import SUBSCRIPTIONS, subscriptions_for
from messaging.services.subscriptions import subscription_states


def outbox_publish(*, type: str, key: str | int, body: dict[str, Any]) -> OutboxMessage:
    """Append a message to the outbox. Call inside the transaction of the change.

    The relay is nudged after commit; a rollback takes the message with it.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("outbox_publish must run inside the change's transaction")
    message = OutboxMessage.objects.create(type=str(type), key=str(key), body=body)
    transaction.on_commit(dispatch.published)
    return message


def relay_pending(*, limit: int = 500, lanes: set[str] | None = None) -> int:
    """Write the deliveries of messages not relayed yet; return how many messages.

    ``lanes``, if given, gets the drain lane of every delivery written: the lanes
    whose drains have new work.

    A subscription gets a copy when its filter accepts the type, it is active and
    the message came after it started (``SubscriptionState``): a filtered-out or
    too-early message is never copied. Safe to run concurrently: the unique
    constraint makes a second copy a no-op.
    """
    # Look before taking the write transaction: on SQLite (IMMEDIATE) an empty relay
    # would still take the database's write lock from the requests issuing loans.
    if not OutboxMessage.objects.filter(relayed_at__isnull=True).exists():
        return 0
    with transaction.atomic():
        messages = list(
            OutboxMessage.objects.filter(relayed_at__isnull=True).order_by("id")[:limit]
        )
        if not messages:
            return 0
        states = subscription_states()
        now = timezone.now()
        deliveries = [
            Delivery(
                message=m,
                subscription=s.name,
                available_at=now,
                partition=partition_of(m.key, s.partitions) if s.partitions else None,
            )
            for m in messages
            for s in subscriptions_for(m.type)
            if states[s.name].takes(m.pk)
        ]
        Delivery.objects.bulk_create(deliveries, ignore_conflicts=True, batch_size=500)
        if lanes is not None:
            lanes.update(SUBSCRIPTIONS[d.subscription].lane for d in deliveries)
        OutboxMessage.objects.filter(pk__in=[m.pk for m in messages]).update(
            relayed_at=now
        )
    return len(messages)
