"""Publish into the outbox, and relay new messages into their deliveries.

A message exists iff the change it describes committed (``outbox_publish`` runs in
the caller's transaction); every accepting subscription gets exactly one delivery
(unique constraint; a second relay of the same message inserts nothing).
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from messaging import dispatch
from messaging.models import Delivery, OutboxMessage
from messaging.policies import partition_of
from messaging.registry import SUBSCRIPTIONS, subscriptions_for
from messaging.services.rows import column, table
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
    if connection.vendor == "postgresql":
        return _relay_returning(limit=limit, lanes=lanes)
    return _relay_orm(limit=limit, lanes=lanes)


def _relay_orm(*, limit: int, lanes: set[str] | None) -> int:
    """``relay_pending`` through the ORM (SQLite; the reference on PostgreSQL)."""
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


# The relay on PostgreSQL: the same rows written by three hand-written statements
# (the look, the marking, the copies), built once per process, instead of the
# ORM's five built on every pass.


@functools.cache
def _relay_sql() -> tuple[str, str, str]:
    """Return the relay's look, its marking UPDATE and its INSERT of the copies."""
    outbox, delivery = table(OutboxMessage), table(Delivery)

    def o(field: str) -> str:
        return column(OutboxMessage, field)

    def d(field: str) -> str:
        return column(Delivery, field)

    look = f"SELECT 1 FROM {outbox} WHERE {o('relayed_at')} IS NULL LIMIT 1"
    # Locked in id order without skipping: a concurrent relay waits for this one's
    # commit and finds these rows relayed (the recheck of FOR UPDATE), so a later
    # message's copies never commit before an earlier one's (a partition's order).
    mark = f"""
        UPDATE {outbox} SET {o("relayed_at")} = %(now)s
        WHERE {o("id")} IN (
            SELECT {o("id")} FROM {outbox} WHERE {o("relayed_at")} IS NULL
            ORDER BY {o("id")} LIMIT %(limit)s FOR UPDATE
        )
        RETURNING {o("id")}, {o("type")}, {o("key")}
    """
    # The columns bulk_create wrote for Delivery(message, subscription,
    # available_at, partition): every other one at its field's default.
    copy = f"""
        INSERT INTO {delivery} (
            {d("message")}, {d("subscription")}, {d("partition")},
            {d("available_at")}, {d("created_at")}, {d("status")}, {d("attempts")},
            {d("failures")}, {d("group_tries")}, {d("lease_owner")}, {d("last_error")}
        )
        SELECT copy.message, copy.subscription, copy.partition,
            %(now)s, %(now)s, %(pending)s, 0, 0, 0, '', ''
        FROM unnest(%(messages)s::bigint[], %(subscriptions)s::varchar[],
                    %(partitions)s::smallint[])
            AS copy(message, subscription, partition)
        ON CONFLICT DO NOTHING
    """
    return look, mark, copy


def _relay_returning(*, limit: int, lanes: set[str] | None) -> int:
    """``relay_pending`` on PostgreSQL: mark the batch relayed and copy it in one
    transaction (a message is marked iff its copies are written)."""
    look, mark, copy = _relay_sql()
    with connection.cursor() as cursor:
        cursor.execute(look)
        if cursor.fetchone() is None:
            return 0
    with transaction.atomic(), connection.cursor() as cursor:
        # Before the marking: a subscription met for the first time starts after
        # the messages relayed before this batch (subscription_states).
        states = subscription_states()
        now = timezone.now()
        cursor.execute(mark, {"now": now, "limit": limit})
        messages = sorted(cursor.fetchall())
        if not messages:
            return 0
        copies = [
            (pk, s.name, partition_of(key, s.partitions) if s.partitions else None)
            for pk, type, key in messages
            for s in subscriptions_for(type)
            if states[s.name].takes(pk)
        ]
        if copies:
            cursor.execute(copy, _copy_params(copies, now))
    if lanes is not None:
        lanes.update(SUBSCRIPTIONS[name].lane for _, name, _ in copies)
    return len(messages)


def _copy_params(
    copies: list[tuple[int, str, int | None]], now: datetime.datetime
) -> dict[str, Any]:
    messages, subscriptions, partitions = zip(*copies, strict=True)
    return {
        "now": now,
        "pending": Delivery.Status.PENDING.value,
        "messages": list(messages),
        "subscriptions": list(subscriptions),
        "partitions": list(partitions),
    }
