"""The hand-written statements of a drain pass do what the ORM's statements did.

On PostgreSQL the claim is one statement (``claim._claim_one_statement``) and the
relay three (``publish._relay_returning``): each is run here beside the ORM code it
replaced (``claim._claim_skip_locked``, ``publish._relay_orm``), on the same rows,
and must leave the same rows and return the same batch. So are the guard rows'
``INSERT ... ON CONFLICT DO NOTHING RETURNING`` (``process._guards_insert``) and
the ORM's read then insert (``process._guards_insert_orm``). The partitions' heads
are read by one statement on both databases; their tests are the partition tests.
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext

from messaging.models import (
    Delivery,
    OutboxMessage,
    ProcessedMessage,
    SubscriptionState,
)
from messaging.registry import SUBSCRIPTIONS
from messaging.services import claim, process, publish
from messaging.services.claim import deliveries_claim, lane_subscriptions

pytestmark = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
    reason="the hand-written claim and relay are PostgreSQL's",
)

NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
OWNER = "worker:1"


def _message(n: int, *, type: str = "loan_issued", key: str = "1") -> OutboxMessage:
    return OutboxMessage.objects.create(
        type=type, key=key, body={"n": n, "book_id": int(key) if key.isdigit() else 0}
    )


def _delivery(subscription: str, *, ago_s: float = 10, **fields: Any) -> Delivery:
    return Delivery.objects.create(
        message=_message(Delivery.objects.count()),
        subscription=subscription,
        available_at=NOW - datetime.timedelta(seconds=ago_s),
        **fields,
    )


def _mixed_backlog() -> None:
    """Due and not due, fresh and tried before, several lease lengths."""
    later = NOW + datetime.timedelta(seconds=30)
    earlier = NOW - datetime.timedelta(seconds=1)
    for n, name in enumerate(
        ["notification", "stock_summary", "broadcast", "lab_probe", "notification"]
    ):
        _delivery(name, ago_s=20 - n)  # fresh and due
    _delivery("cache_invalidation", ago_s=30)  # the oldest fresh one
    _delivery("stock_summary", leased_until=later)  # leased to someone
    _delivery("broadcast", leased_until=earlier, ago_s=5)  # a lease run out: due
    _delivery("notification", ago_s=-5)  # not yet available
    _delivery("notification", status=Delivery.Status.DONE)
    _delivery("book_ledger", partition=1)  # partitioned: never in a batch
    _delivery("lab_slow")  # another lane
    _delivery("lab_probe", attempts=2, failures=1, ago_s=3)  # tried before
    _delivery("notification", attempts=1, group_tries=1, ago_s=8)  # older, tried


def _state() -> list[dict[str, Any]]:
    return [model_to_dict(d) for d in Delivery.objects.order_by("id")]


def _batch(deliveries: list[Delivery]) -> list[tuple[Any, ...]]:
    return [
        (
            d.pk,
            d.attempts,
            d.group_tries,
            d.leased_until,
            d.lease_owner,
            d.message.pk,
            d.message.body,
        )
        for d in deliveries
    ]


def _both_claims(limit: int, lane: str = "main") -> tuple[Any, Any]:
    """Claim with the ORM (rolled back), then with the statement, from one state."""
    with transaction.atomic():
        names = lane_subscriptions(lane)
        reference = claim._claim_skip_locked(
            claim._due_in(names), owner=OWNER, clock=lambda: NOW, limit=limit
        )
        expected = (_batch(reference), _state())
        transaction.set_rollback(True)
    claimed = deliveries_claim(owner=OWNER, limit=limit, now=NOW, lane=lane)
    return expected, (_batch(claimed), _state())


@pytest.mark.django_db
@pytest.mark.parametrize("limit", [100, 3, 1])
def test_the_statement_claims_what_the_orm_claim_claimed(limit):
    _mixed_backlog()
    expected, got = _both_claims(limit)
    assert got == expected
    batch = got[0]
    assert batch, "the backlog has due deliveries"
    # The lab's 2 s lease and the default one both occur in a full batch.
    if limit == 100:
        assert len({row[3] for row in batch}) > 1


@pytest.mark.django_db
def test_an_outside_subscription_is_never_claimed_into_the_group(monkeypatch):
    monkeypatch.setitem(
        SUBSCRIPTIONS,
        "notification",
        replace(SUBSCRIPTIONS["notification"], outside=True),
    )
    _mixed_backlog()
    expected, got = _both_claims(100)
    assert got == expected
    subscriptions = dict(Delivery.objects.values_list("pk", "subscription"))
    fresh = {pk: tries for pk, attempts, tries, *_ in got[0] if attempts == 1}
    outside = [
        tries for pk, tries in fresh.items() if subscriptions[pk] == "notification"
    ]
    assert outside == [0, 0]
    assert sorted(fresh.values()) == [0, 0, 1, 1, 1, 1, 1]


@pytest.mark.django_db
def test_one_fresh_delivery_alone_is_no_group():
    _delivery("notification")
    _delivery("stock_summary", attempts=1, failures=1)
    expected, got = _both_claims(100)
    assert got == expected
    assert [tries for _, _, tries, *_ in got[0]] == [0, 0]


@pytest.mark.django_db
def test_nothing_due_claims_nothing():
    _delivery("notification", ago_s=-5)
    expected, got = _both_claims(100)
    assert got == expected
    assert got[0] == []


@pytest.mark.django_db
def test_the_claim_of_another_lane_takes_only_its_subscriptions():
    _mixed_backlog()
    expected, got = _both_claims(100, lane="slow")
    assert got == expected
    assert [row[5] for row in got[0]] == list(
        Delivery.objects.filter(subscription="lab_slow").values_list(
            "message_id", flat=True
        )
    )


# --- the relay ----------------------------------------------------------------------


def _relayed() -> tuple[list[tuple[Any, ...]], list[tuple[int, bool]]]:
    copies = [
        (
            d["message"],
            d["subscription"],
            d["partition"],
            d["status"],
            d["attempts"],
            d["failures"],
            d["group_tries"],
            d["leased_until"],
            d["lease_owner"],
            d["last_error"],
            d["first_failed_at"],
            d["last_failed_at"],
            d["done_at"],
            d["available_at"] is not None,
        )
        for d in _state()
    ]
    marks = [
        (m.pk, m.relayed_at is not None) for m in OutboxMessage.objects.order_by("id")
    ]
    return sorted(copies), marks


@pytest.mark.django_db
def test_the_relay_writes_the_copies_the_orm_relay_wrote():
    SubscriptionState.objects.create(name="lab_late", active=True, starts_after=0)
    first = _message(1, key="7")
    for n, key in enumerate(["7", "8", "book-9", "10"]):
        _message(n, key=key)
    _message(5, type="stock_corrected", key="11")
    _message(6, type="lab_probe", key="run-1")
    # A paused subscription, and one that starts after the second message.
    SubscriptionState.objects.update_or_create(
        name="lab_late", defaults={"active": False, "starts_after": 0}
    )
    SubscriptionState.objects.update_or_create(
        name="broadcast", defaults={"active": True, "starts_after": first.pk + 1}
    )
    # A copy written already (a relay that raced this one): not written twice.
    Delivery.objects.create(
        message=first, subscription="notification", available_at=NOW
    )
    with transaction.atomic():
        lanes: set[str] = set()
        count = publish._relay_orm(limit=500, lanes=lanes)
        expected = (count, lanes, _relayed())
        transaction.set_rollback(True)
    lanes = set()
    count = publish.relay_pending(lanes=lanes)
    assert (count, lanes, _relayed()) == expected
    assert count == 7
    assert publish.relay_pending() == 0


@pytest.mark.django_db
def test_the_relay_takes_the_oldest_messages_up_to_its_limit():
    messages = [_message(n, key=str(n)) for n in range(5)]
    assert publish.relay_pending(limit=3) == 3
    relayed = set(
        OutboxMessage.objects.filter(relayed_at__isnull=False).values_list(
            "pk", flat=True
        )
    )
    assert relayed == {m.pk for m in messages[:3]}
    assert set(Delivery.objects.values_list("message_id", flat=True)) == relayed
    assert publish.relay_pending(limit=3) == 2


# --- the guard rows -----------------------------------------------------------------


def _guards() -> list[tuple[str, int]]:
    return list(
        ProcessedMessage.objects.order_by("subscription", "message_id").values_list(
            "subscription", "message_id"
        )
    )


@pytest.mark.django_db
def test_the_guard_statement_inserts_and_returns_what_the_orm_guards_did():
    group = [_delivery(name) for name in ("notification", "stock_summary")]
    group += [_delivery("broadcast"), _delivery("notification")]
    # Two guards there already: their effects happened, they are not new.
    for done in group[1:3]:
        ProcessedMessage.objects.create(
            subscription=done.subscription, message_id=done.message_id
        )
    with transaction.atomic():
        expected = (process._guards_insert_orm(group), _guards())
        transaction.set_rollback(True)
    with transaction.atomic():
        got = (process._guards_insert(group), _guards())
    assert got == expected
    assert got[0] == {(d.subscription, d.message_id) for d in (group[0], group[3])}
    # All there now: nothing new, one by one or as a group.
    assert process._guards_insert(group) == set()
    assert not process._guard_insert(group[0])


@pytest.mark.django_db
def test_one_guard_is_one_statement():
    delivery = _delivery("notification")
    with CaptureQueriesContext(connection) as queries:
        assert process._guard_insert(delivery)
    assert len(queries) == 1
    assert _guards() == [("notification", delivery.message_id)]
