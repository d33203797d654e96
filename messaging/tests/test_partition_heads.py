"""The partitions' heads and the runs behind them, read in one statement
(``partitions._free_runs``): LATERAL on PostgreSQL, a correlated IN on SQLite. Both
must give, for each free partition, what the ORM's read of a turn gives
(``partitions._leading``)."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from messaging.models import Delivery, OutboxMessage, PartitionLease
from messaging.registry import SUBSCRIPTIONS
from messaging.services import partitions


def _copy(partition: int, **fields) -> Delivery:
    message = OutboxMessage.objects.create(
        type="loan_issued", key=str(partition), body={"partition": partition}
    )
    return Delivery.objects.create(
        message=message,
        subscription="book_ledger",
        partition=partition,
        available_at=timezone.now(),
        **fields,
    )


@pytest.mark.django_db
def test_each_free_partition_gives_its_oldest_pending_delivery_and_message():
    ledger = SUBSCRIPTIONS["book_ledger"]
    now = timezone.now()
    _copy(0, status=Delivery.Status.DONE)
    oldest = _copy(0, attempts=1, failures=1)
    _copy(0)
    held = _copy(1)
    expired = _copy(2)
    # No lease rows yet: the first read creates them.
    assert partitions._free_heads(ledger, now) == {
        0: oldest,
        1: held,
        2: expired,
    }
    PartitionLease.objects.filter(subscription="book_ledger", partition=1).update(
        owner="w", leased_until=now + datetime.timedelta(seconds=30)
    )
    PartitionLease.objects.filter(subscription="book_ledger", partition=2).update(
        owner="w", leased_until=now - datetime.timedelta(seconds=1)
    )
    with CaptureQueriesContext(connection) as queries:
        heads = partitions._free_heads(ledger, now)
        assert heads == {0: oldest, 2: expired}
        # Each head comes with its message, as select_related gave it.
        assert heads[0].message.body == {"partition": 0}
        assert heads[0].attempts == 1
        assert isinstance(heads[2].available_at, datetime.datetime)
    assert len(queries) == 1


def _leading_by_orm(partitions_: list[int], limit: int) -> dict[int, list[Delivery]]:
    """The reference: each partition's first pending deliveries, read by the ORM."""
    read = {p: partitions._leading("book_ledger", p, limit) for p in partitions_}
    return {p: rows for p, rows in read.items() if rows}


def _fields(runs: dict[int, list[Delivery]]) -> dict[int, list[tuple[object, ...]]]:
    return {
        p: [
            (
                d.pk,
                d.attempts,
                d.status,
                d.available_at,
                d.leased_until,
                d.message.pk,
                d.message.body,
            )
            for d in rows
        ]
        for p, rows in runs.items()
    }


@pytest.mark.django_db
@pytest.mark.parametrize("run_read", [16, 2, 1])
def test_each_free_partition_gives_the_rows_a_turn_would_read(monkeypatch, run_read):
    monkeypatch.setattr(partitions, "RUN_READ", run_read)
    ledger = SUBSCRIPTIONS["book_ledger"]
    now = timezone.now()
    _copy(0, status=Delivery.Status.DONE)
    _copy(0, attempts=1, failures=1)
    for _ in range(3):
        _copy(0)
    _copy(1)
    _copy(1, status=Delivery.Status.DEAD)
    _copy(1, leased_until=now + datetime.timedelta(seconds=30))
    _copy(2)  # leased below: none of it is read
    _copy(2)
    partitions._ensure_leases(ledger)
    PartitionLease.objects.filter(subscription="book_ledger", partition=2).update(
        owner="w", leased_until=now + datetime.timedelta(seconds=30)
    )
    with CaptureQueriesContext(connection) as queries:
        runs = partitions._free_runs(ledger, now)
    assert len(queries) == 1
    assert _fields(runs) == _fields(_leading_by_orm([0, 1, 3], run_read))
    assert [len(rows) for rows in runs.values()] == [min(4, run_read), min(2, run_read)]


@pytest.mark.django_db
def test_a_lease_run_out_frees_its_partition_rows():
    ledger = SUBSCRIPTIONS["book_ledger"]
    now = timezone.now()
    first, second = _copy(3), _copy(3)
    partitions._ensure_leases(ledger)
    PartitionLease.objects.filter(subscription="book_ledger", partition=3).update(
        owner="w", leased_until=now - datetime.timedelta(seconds=1)
    )
    assert partitions._free_runs(ledger, now) == {3: [first, second]}
