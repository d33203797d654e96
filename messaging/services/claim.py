"""Claim due deliveries: lease them to one worker and count the attempt."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from messaging.models import Delivery
from messaging.registry import SUBSCRIPTIONS


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

    def due_at(at: datetime.datetime) -> Any:
        # Partitioned deliveries are taken a partition at a time
        # (messaging.services.partitions).
        return Delivery.objects.filter(
            due(at), partition__isnull=True, subscription__in=names
        )

    # Read inside the claim's transaction: on SQLite its start can wait seconds for
    # the write lock, and a lease counted from before that wait would be shorter
    # than promised (or over before the batch is even ours).
    clock = timezone.now if now is None else lambda: now
    if connection.vendor == "postgresql":
        return _claim_skip_locked(due_at, owner=owner, clock=clock, limit=limit)
    return _claim_compare_and_set(due_at, owner=owner, clock=clock, limit=limit)


_Clock = Callable[[], datetime.datetime]
_DueAt = Callable[[datetime.datetime], Any]


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


def _claim_skip_locked(
    due_at: _DueAt, *, owner: str, clock: _Clock, limit: int
) -> list[Delivery]:
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
