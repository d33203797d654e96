"""Claim due deliveries: lease them to one worker and count the attempt."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from messaging.models import Delivery, OutboxMessage
from messaging.registry import SUBSCRIPTIONS
from messaging.services.rows import column, reader, table


def due(now: datetime.datetime) -> Q:
    """Return the filter of deliveries due at ``now``: pending, available, unleased."""
    return Q(status=Delivery.Status.PENDING, available_at__lte=now) & (
        Q(leased_until__isnull=True) | Q(leased_until__lt=now)
    )


def lane_subscriptions(lane: str) -> list[str]:
    """Return the names of the subscriptions drained in ``lane``."""
    return [s.name for s in SUBSCRIPTIONS.values() if s.lane == lane]


def deliveries_claim(
    *,
    owner: str,
    limit: int,
    now: datetime.datetime | None = None,
    lane: str = "main",
) -> list[Delivery]:
    """Lease up to ``limit`` due deliveries to ``owner``; count the attempt now.

    Counting at claim time is what isolates a message that kills its worker: the
    count grows even though the worker never gets to record a failure.

    A batch is up to ``limit`` fresh deliveries plus at most one that was tried
    before, placed last: a retried delivery may be the one that killed a worker, so
    it is processed after its batch-mates, which then lose nothing if it kills this
    worker too. Taking one in every batch keeps retries from starving behind a
    steady stream of fresh work.
    """
    names = lane_subscriptions(lane)
    # Read inside the claim's transaction: on SQLite its start can wait seconds for
    # the write lock, and a lease counted from before that wait would be shorter
    # than promised (or over before the batch is even ours).
    clock = timezone.now if now is None else lambda: now
    if connection.vendor == "postgresql":
        return _claim_one_statement(names, owner=owner, clock=clock, limit=limit)
    return _claim_compare_and_set(_due_in(names), owner=owner, clock=clock, limit=limit)


_Clock = Callable[[], datetime.datetime]
_DueAt = Callable[[datetime.datetime], Any]


def _due_in(names: list[str]) -> _DueAt:
    """Return the due deliveries of ``names`` at a moment, as a queryset."""

    def due_at(at: datetime.datetime) -> Any:
        # Partitioned deliveries are taken a partition at a time
        # (messaging.services.partitions).
        return Delivery.objects.filter(
            due(at), partition__isnull=True, subscription__in=names
        )

    return due_at


def lease_length(subscription_name: str) -> datetime.timedelta:
    """Return how long a claim of the subscription's delivery lasts (its lease)."""
    own = SUBSCRIPTIONS[subscription_name].visibility
    return (
        own
        if own is not None
        else datetime.timedelta(seconds=settings.MESSAGING_LEASE_SECONDS)
    )


def _batch_order(due: Any) -> Any:
    return due.order_by("available_at", "id")


@functools.cache
def _claim_sql() -> str:
    """Return the claim as one statement (PostgreSQL), its names from the models.

    1. ``fresh``: up to ``limit`` due deliveries never tried, oldest first, locked
       (SKIP LOCKED: a concurrent claim takes others, never the same ones).
    2. ``retried``: at most one due delivery tried before, locked the same way.
    3. ``picked``: both, each fresh one marked for the group when two or more of
       them are not ``outside`` subscriptions (``groupable``).
    4. The UPDATE counts each attempt, the group try, and leases each row for its
       subscription's lease (``leases``, one row per subscription of the lane);
       RETURNING hands back the rows with their messages.
    """
    d, m = "d", "m"
    delivery, message = table(Delivery), table(OutboxMessage)

    def c(field: str) -> str:
        return column(Delivery, field)

    due = (
        f"{c('status')} = %(pending)s AND {c('available_at')} <= %(now)s"
        f" AND ({c('leased_until')} IS NULL OR {c('leased_until')} < %(now)s)"
        f" AND {c('partition')} IS NULL AND {c('subscription')} = ANY(%(names)s)"
    )
    order = f"ORDER BY {c('available_at')}, {c('id')}"
    returned = ", ".join(
        (reader(Delivery, d).columns, reader(OutboxMessage, m).columns)
    )
    return f"""
        WITH fresh AS (
            SELECT {c("id")} AS id, {c("subscription")} AS subscription
            FROM {delivery} WHERE {due} AND {c("attempts")} = 0
            {order} LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        ), retried AS (
            SELECT {c("id")} AS id FROM {delivery} WHERE {due} AND {c("attempts")} > 0
            {order} LIMIT 1 FOR UPDATE SKIP LOCKED
        ), together AS (
            SELECT count(*) >= 2 AS yes FROM fresh
            WHERE NOT (subscription = ANY(%(outside)s))
        ), picked AS (
            SELECT fresh.id,
                   (together.yes AND NOT (subscription = ANY(%(outside)s))) AS grouped
            FROM fresh, together
            UNION ALL
            SELECT retried.id, false FROM retried
        ), leases AS (
            SELECT * FROM unnest(%(lease_names)s::varchar[], %(leases)s::interval[])
                AS lease(subscription, length)
        )
        UPDATE {delivery} AS {d} SET
            {c("attempts")} = {d}.{c("attempts")} + 1,
            {c("group_tries")} = {d}.{c("group_tries")} + picked.grouped::int,
            {c("lease_owner")} = %(owner)s,
            {c("leased_until")} = %(now)s::timestamptz + leases.length
        FROM picked, leases, {message} AS {m}
        WHERE {d}.{c("id")} = picked.id
            AND leases.subscription = {d}.{c("subscription")}
            AND {m}.{column(OutboxMessage, "id")} = {d}.{c("message")}
        RETURNING {returned}
    """


def _claim_one_statement(
    names: list[str], *, owner: str, clock: _Clock, limit: int
) -> list[Delivery]:
    """Claim as ``_claim_skip_locked`` does, in one statement (PostgreSQL).

    The ORM's claim took two locking reads and an UPDATE per lease length, about a
    third of an empty pass's CPU spent building SQL; this statement is built once
    per process. The batch comes back in the ORM claim's order: the fresh rows by
    (available_at, id), then the one tried before.
    """
    outside = [name for name in names if SUBSCRIPTIONS[name].outside]
    deliveries, messages = reader(Delivery, "d"), reader(OutboxMessage, "m")
    # One statement is its own transaction: no BEGIN and COMMIT around it.
    with connection.cursor() as cursor:
        cursor.execute(
            _claim_sql(),
            {
                "pending": Delivery.Status.PENDING.value,
                "now": clock(),
                "names": names,
                "limit": limit,
                "outside": outside,
                "lease_names": names,
                "leases": [lease_length(name) for name in names],
                "owner": owner,
            },
        )
        rows = cursor.fetchall()
    claimed = []
    for row in rows:
        delivery = deliveries.read(row)
        delivery.message = messages.read(row[deliveries.width :])
        claimed.append(delivery)
    # attempts is 1 on a fresh row now; a row tried before goes last.
    claimed.sort(key=lambda d: (d.attempts > 1, d.available_at, d.pk))
    return claimed


def _claim_skip_locked(
    due_at: _DueAt, *, owner: str, clock: _Clock, limit: int
) -> list[Delivery]:
    """The ORM's claim on PostgreSQL: the reference ``_claim_one_statement`` is
    tested against (messaging/tests/test_claim_statement.py)."""
    with transaction.atomic():
        now = clock()
        locked = (
            due_at(now)
            .select_related("message")
            .select_for_update(skip_locked=True, of=("self",))
        )
        fresh = list(_batch_order(locked.filter(attempts=0))[:limit])
        rows = fresh + list(_batch_order(locked.filter(attempts__gt=0))[:1])
        grouped = set(groupable([(r.pk, r.attempts, r.subscription) for r in fresh]))
        # One plain UPDATE per (lease length, in a group): the rows are locked, so
        # attempts + 1 is what each row gets; a bulk_update's CASE per row costs
        # far more to build and to plan.
        leases: dict[tuple[datetime.timedelta, bool], list[Delivery]] = {}
        for row in rows:
            key = (lease_length(row.subscription), row.pk in grouped)
            leases.setdefault(key, []).append(row)
        for (lease, in_group), same in leases.items():
            Delivery.objects.filter(pk__in=[row.pk for row in same]).update(
                leased_until=now + lease,
                attempts=F("attempts") + 1,
                group_tries=F("group_tries") + int(in_group),
                lease_owner=owner,
            )
            for row in same:
                row.leased_until = now + lease
                row.attempts += 1
                row.group_tries += in_group
                row.lease_owner = owner
    return rows


def groupable(candidates: list[tuple[int, int, str]]) -> list[int]:
    """Return the ids of a claim's candidates to process as one group commit.

    Only deliveries never tried before, and only when two or more qualify: a
    delivery tried before may be what kills workers, so it always runs alone. An
    ``outside`` subscription's slow part runs before its transaction, so it cannot
    share one.
    """
    ids = [
        pk
        for pk, attempts, name in candidates
        if attempts == 0 and not SUBSCRIPTIONS[name].outside
    ]
    return ids if len(ids) > 1 else []


def _claim_compare_and_set(
    due_at: _DueAt, *, owner: str, clock: _Clock, limit: int
) -> list[Delivery]:
    """Claim with one conditional UPDATE per lease length, checked by its row count.

    SQLite has no row locks. The candidates are read and claimed inside one write
    transaction (IMMEDIATE, see settings), and the UPDATE repeats the due condition
    and each row's attempt count: it only moves rows nobody claimed since they were
    read, and its row count says whether all of them moved. If one did not (a claim
    raced in, say under a deferred transaction mode), the batch is rolled back and
    claimed row by row, each row's count deciding who won it.
    """
    try:
        with transaction.atomic():
            now = clock()
            due = due_at(now)
            candidates = _claim_candidates(due, limit)
            if not _claim_all(due, candidates, owner=owner, now=now):
                raise _ClaimRaced
    except _ClaimRaced:
        with transaction.atomic():
            now = clock()
            due = due_at(now)
            candidates = [
                c
                for c in _claim_candidates(due, limit)
                if _claim_all(due, [c], owner=owner, now=now)
            ]
    return list(
        Delivery.objects.filter(pk__in=[pk for pk, *_ in candidates])
        .select_related("message")
        .order_by("id")
    )


class _ClaimRaced(Exception):
    pass


def _claim_candidates(due: Any, limit: int) -> list[tuple[int, int, str]]:
    columns = ("id", "attempts", "subscription")
    fresh = list(_batch_order(due.filter(attempts=0)).values_list(*columns)[:limit])
    retried = list(_batch_order(due.filter(attempts__gt=0)).values_list(*columns)[:1])
    return fresh + retried


def _claim_all(
    due: Any,
    candidates: list[tuple[int, int, str]],
    *,
    owner: str,
    now: datetime.datetime,
) -> bool:
    """Claim every candidate or report that some moved.

    One UPDATE per (lease, attempt count) group: a fresh batch is a single statement.
    """
    grouped = set(groupable(candidates))
    groups: dict[tuple[datetime.timedelta, int, bool], list[int]] = {}
    for pk, attempts, subscription in candidates:
        key = (lease_length(subscription), attempts, pk in grouped)
        groups.setdefault(key, []).append(pk)
    for (lease, attempts, in_group), pks in groups.items():
        moved = due.filter(pk__in=pks, attempts=attempts).update(
            attempts=attempts + 1,
            group_tries=F("group_tries") + int(in_group),
            lease_owner=owner,
            leased_until=now + lease,
        )
        if moved != len(pks):
            return False
    return True
