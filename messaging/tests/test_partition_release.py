"""Freeing a partition held by a dead worker: only a dead holder's, only with the
redrive right, confirmed first; the head is then isolated by the usual rule."""

import datetime
import os
import socket
import subprocess
import sys

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from library.models import BookLedger
from library.services import stock_correct
from messaging.models import DeadLetter, Delivery, OutboxMessage, PartitionLease
from messaging.services import messaging_drain, relay_pending
from messaging.services.leases import (
    LeaseReleaseError,
    partition_dead_leases_release,
)

pytestmark = pytest.mark.django_db(transaction=True)
LEDGER = "book_ledger"
LIST = "/admin/messaging/partitionlease/"


def dead_token() -> str:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return f"{socket.gethostname()}:{done.stdout.strip()}:dead0001"


def held_partition(owner: str) -> tuple[PartitionLease, Delivery, list[int]]:
    """Book 2's partition held by ``owner``: its head claimed twice, two behind it."""
    for shelf in (2, 1, 0):
        stock_correct(book_id=2, on_shelf=shelf)
    relay_pending()
    copies = list(Delivery.objects.filter(subscription=LEDGER).order_by("message_id"))
    head, behind = copies[0], [d.message_id for d in copies[1:]]
    until = timezone.now() + datetime.timedelta(minutes=30)
    Delivery.objects.filter(pk=head.pk).update(
        attempts=2, failures=1, lease_owner=owner, leased_until=until
    )
    lease, _ = PartitionLease.objects.update_or_create(
        subscription=LEDGER,
        partition=head.partition,
        defaults={"owner": owner, "leased_until": until},
    )
    return lease, head, behind


def drain() -> None:
    messaging_drain(owner="test:1:drain", budget_seconds=10)


def operator(username: str, *codenames: str) -> tuple[Client, User]:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="messaging",
            codename__in=["view_partitionlease", *codenames],
        )
    )
    client = Client()
    client.force_login(user)
    return client, user


def test_a_partition_held_by_a_dead_worker_waits_then_flows_once_freed(library_rows):
    lease, head, behind = held_partition(dead_token())
    drain()
    assert Delivery.objects.filter(message_id__in=behind, status="pending").count() == 2
    client, user = operator("oncall", "redrive_deadletter")
    listed = client.get(LIST).content.decode()
    assert "not running" in listed  # the holder is shown dead in the list
    data = {"action": "release_dead", "_selected_action": [lease.pk]}
    confirm = client.post(LIST, data)
    assert confirm.status_code == 200
    assert "Free 1 partition" in confirm.content.decode()
    assert PartitionLease.objects.get(pk=lease.pk).owner  # nothing moved yet
    assert client.post(LIST, {**data, "post": "yes"}).status_code == 302
    freed = PartitionLease.objects.get(pk=lease.pk)
    assert freed.owner == ""
    assert freed.leased_until is None
    assert LogEntry.objects.filter(user=user).exists()
    drain()
    # The head's worker died at its last allowed attempt: isolated, never re-run.
    letter = DeadLetter.objects.get(delivery_id=head.pk)
    assert "worker died" in letter.last_error
    assert set(BookLedger.objects.values_list("message_id", flat=True)) == set(behind)


def test_a_live_or_unknown_holder_keeps_its_partition(library_rows):
    for owner in (f"{socket.gethostname()}:{os.getpid()}:live", "elsewhere:7:x"):
        OutboxMessage.objects.all().delete()
        lease, _, _ = held_partition(owner)
        with pytest.raises(LeaseReleaseError, match="Wait for its lease"):
            partition_dead_leases_release(lease_id=lease.pk, user=None)
        assert PartitionLease.objects.get(pk=lease.pk).owner == owner


def test_freeing_needs_the_redrive_right(library_rows):
    lease, _, _ = held_partition(dead_token())
    client, _ = operator("onlooker")
    data = {"action": "release_dead", "_selected_action": [lease.pk], "post": "yes"}
    client.post(LIST, data)
    assert PartitionLease.objects.get(pk=lease.pk).owner != ""
