"""The partitions' heads, read in one statement (``partitions._free_heads``)."""

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
