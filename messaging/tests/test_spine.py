"""The outbox, the relay, claims, effects, retries and dead letters, in one process."""

import datetime

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, transaction
from django.utils import timezone

from library.errors import LibraryError
from library.models import Book, BookLedger, BranchStock, Notification
from library.services import loan_issue, loan_return, stock_correct
from library.subscribers import notify_member
from messaging import registry
from messaging.checks import registry_check
from messaging.models import DeadLetter, Delivery, OutboxMessage, ProcessedMessage
from messaging.services import (
    dead_letter_redrive,
    deliveries_claim,
    delivery_process,
    messaging_drain,
    outbox_publish,
    relay_pending,
)
from messaging.tests.conftest import LONG_BACKOFF, make_due

LEASE = datetime.timedelta(seconds=30)

pytestmark = pytest.mark.django_db


def drain() -> None:
    messaging_drain(owner="test-worker", budget_seconds=30)


def test_issue_writes_outbox_row_in_same_transaction(library_rows):
    loan = loan_issue(book_id=1, member_id=1)
    (message,) = OutboxMessage.objects.all()
    assert message.type == "loan_issued"
    assert message.key == "1"
    assert message.body == {
        "loan_id": loan.pk,
        "book_id": 1,
        "member_id": 1,
        "branch_id": 2,
        "on_shelf": 2,
        "book_version": 2,
        "branch_version": 1,
        "branch_total": 8,
    }


def issue_then_fail() -> None:
    with transaction.atomic():
        loan_issue(book_id=1, member_id=1)
        raise RuntimeError("the caller's transaction fails after the service")


def test_rolled_back_change_leaves_no_message(library_rows):
    with pytest.raises(RuntimeError):
        issue_then_fail()
    assert not OutboxMessage.objects.exists()
    assert Book.objects.get(pk=1).on_shelf == 3


def test_refused_change_publishes_nothing(library_rows):
    Book.objects.filter(pk=1).update(on_shelf=0)
    with pytest.raises(LibraryError):
        loan_issue(book_id=1, member_id=1)
    assert not OutboxMessage.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_publish_outside_a_transaction_is_refused(library_rows):
    with pytest.raises(RuntimeError, match="inside the change's transaction"):
        outbox_publish(type=registry.MessageType.LOAN_ISSUED, key=1, body={})


def test_nudge_is_sent_only_after_commit(
    library_rows, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        loan_issue(book_id=1, member_id=1)
    # After commit: move the book's version record (the page tier's key), nudge the
    # relay and announce the new message to log followers.
    names = [getattr(c, "func", c).__name__ for c in callbacks]
    assert names == ["book_version_announce", "published"]


def test_relay_writes_one_delivery_per_accepting_subscription(library_rows):
    loan_issue(book_id=1, member_id=1)
    stock_correct(book_id=2, on_shelf=5)
    assert relay_pending() == 2
    assert relay_pending() == 0  # nothing left, and no second copy
    subs = sorted(Delivery.objects.values_list("message__type", "subscription"))
    assert subs == [
        ("loan_issued", "book_ledger"),
        ("loan_issued", "broadcast"),
        ("loan_issued", "cache_invalidation"),
        ("loan_issued", "notification"),
        ("loan_issued", "stock_summary"),
        ("stock_corrected", "book_ledger"),
        ("stock_corrected", "broadcast"),
        ("stock_corrected", "cache_invalidation"),
        ("stock_corrected", "stock_summary"),
    ]
    # The ordered subscription's copies carry their partition: book id mod 4.
    partitions = set(
        Delivery.objects.filter(subscription="book_ledger").values_list(
            "message__key", "partition"
        )
    )
    assert partitions == {("1", 1), ("2", 2)}


def test_relaying_the_same_message_twice_adds_no_copy(library_rows):
    loan_issue(book_id=1, member_id=1)
    relay_pending()
    OutboxMessage.objects.update(
        relayed_at=None
    )  # as if a second relay raced the first
    relay_pending()
    assert Delivery.objects.count() == 5


def test_drain_runs_every_effect_once(library_rows):
    loan = loan_issue(book_id=1, member_id=2)
    loan_return(loan_id=loan.pk)
    drain()
    assert Delivery.objects.exclude(status="done").count() == 0
    texts = list(Notification.objects.order_by("id").values_list("kind", "member_id"))
    assert texts == [("loan_issued", 2), ("return_received", 2)]
    summary = BranchStock.objects.get(branch_id=2)
    assert summary.on_shelf_total == 9
    assert summary.last_message_id == OutboxMessage.objects.latest("id").pk


def test_attempt_is_counted_at_claim_time(library_rows):
    loan_issue(book_id=1, member_id=1)
    relay_pending()
    claimed = deliveries_claim(owner="w1", limit=10)
    assert {d.attempts for d in claimed} == {1}
    # Every unordered copy; the ordered one is claimed with its partition instead.
    unordered = Delivery.objects.filter(partition__isnull=True)
    assert set(unordered.values_list("attempts", flat=True)) == {1}
    assert len(claimed) == unordered.count() == 4
    assert deliveries_claim(owner="w2", limit=10) == []  # leased to w1


def test_redelivered_message_has_no_second_effect(library_rows):
    loan_issue(book_id=1, member_id=1)
    drain()
    delivery = Delivery.objects.get(subscription="notification")
    # Simulate a worker that ran the effect but died before the done mark was seen.
    Delivery.objects.filter(pk=delivery.pk).update(status="pending")
    make_due(delivery)
    (again,) = [
        d for d in deliveries_claim(owner="w2", limit=10) if d.pk == delivery.pk
    ]
    assert delivery_process(again, owner="w2").result == "duplicate"
    assert Notification.objects.count() == 1
    assert Delivery.objects.get(pk=delivery.pk).status == "done"


def broken_handler(message):
    raise LookupError(f"member not found (message {message.pk})")


@pytest.fixture
def broken_notifications(monkeypatch, steady_jitter):
    sub = registry.SUBSCRIPTIONS["notification"]
    monkeypatch.setitem(
        registry.SUBSCRIPTIONS,
        "notification",
        registry.Subscription(
            name=sub.name,
            accepts=sub.accepts,
            max_attempts=3,
            backoff=LONG_BACKOFF,
        ),
    )
    monkeypatch.setitem(registry.HANDLERS, "notification", broken_handler)


def test_failure_is_retried_with_backoff_then_dead_lettered(
    library_rows, broken_notifications
):
    loan_issue(book_id=1, member_id=1)
    drain()
    delivery = Delivery.objects.get(subscription="notification")
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    message_id = OutboxMessage.objects.get().pk
    expected = f"LookupError: member not found (message {message_id})"
    assert delivery.last_error == expected
    assert delivery.last_failed_at is not None
    assert delivery.available_at >= delivery.last_failed_at  # waits for its backoff
    for _ in range(2):
        make_due(delivery)
        drain()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("dead", 3)
    letter = DeadLetter.objects.get()
    assert letter.body == OutboxMessage.objects.get().body
    assert (letter.message_type, letter.subscription, letter.attempts) == (
        "loan_issued",
        "notification",
        3,
    )
    assert letter.last_error.startswith("LookupError")
    assert letter.first_failed_at <= letter.last_failed_at
    # The other subscriptions were not held back by the broken one.
    assert Delivery.objects.filter(status="done").count() == 4


def test_redrive_after_the_fix_processes_the_letter(
    library_rows, broken_notifications, django_user_model
):
    loan_issue(book_id=1, member_id=1)
    for _ in range(3):
        make_due(*Delivery.objects.all())
        drain()
    letter = DeadLetter.objects.get()
    operator = django_user_model.objects.create_user("op", is_staff=True)
    registry.SUBSCRIPTIONS["notification"] = registry.Subscription(
        name="notification",
        accepts=registry.SUBSCRIPTIONS["notification"].accepts,
    )  # (monkeypatch restores the original after the test)
    registry.HANDLERS["notification"] = notify_member
    assert dead_letter_redrive(ids=[letter.pk], user=operator) == 1
    assert dead_letter_redrive(ids=[letter.pk], user=operator) == 0  # once only
    delivery = Delivery.objects.get(pk=letter.delivery_id)
    assert (delivery.status, delivery.attempts) == ("pending", 0)
    drain()
    assert Notification.objects.count() == 1
    letter.refresh_from_db()
    assert letter.redriven_by == operator
    assert letter.redrive_count == 1


def test_delivery_past_its_attempts_is_isolated_without_running(library_rows):
    loan_issue(book_id=1, member_id=1)
    relay_pending()
    delivery = Delivery.objects.get(subscription="notification")
    # Five claims whose workers all died: the attempts were counted, nothing recorded.
    Delivery.objects.filter(pk=delivery.pk).update(attempts=5)
    make_due(delivery)
    drain()
    delivery.refresh_from_db()
    assert delivery.status == "dead"
    assert "worker died" in DeadLetter.objects.get().last_error
    assert not Notification.objects.exists()
    assert not ProcessedMessage.objects.filter(subscription="notification").exists()


def test_unparseable_body_goes_to_dead_letters_and_the_rest_flow(library_rows):
    with transaction.atomic():
        outbox_publish(
            type=registry.MessageType.LOAN_ISSUED, key=1, body={"loan": "??"}
        )
    loan_issue(book_id=2, member_id=1)
    for _ in range(5):
        make_due(*Delivery.objects.filter(status="pending"))
        drain()
    dead = DeadLetter.objects.filter(delivery__message__body={"loan": "??"})
    assert {d.subscription for d in dead} == {
        "notification",
        "stock_summary",
        "broadcast",
        "book_ledger",  # at the head of its partition, then the partition flowed
    }
    assert all("no integer" in d.last_error for d in dead)
    assert Notification.objects.count() == 1  # the well-formed loan went through
    assert BookLedger.objects.filter(book_id=2).count() == 1


def test_registry_refuses_an_unhandled_type(monkeypatch):
    monkeypatch.setattr(registry, "SUBSCRIPTIONS", {})
    errors = {e.id: e.msg for e in registry_check()}
    assert "loan_issued" in errors["messaging.E004"]


def test_check_passes_on_the_project():
    assert registry_check() == []


def test_check_names_a_subscription_without_handler(monkeypatch):
    monkeypatch.setitem(
        registry.SUBSCRIPTIONS,
        "orphan",
        registry.Subscription(name="orphan", accepts=registry.LIBRARY_TYPES),
    )
    errors = registry_check()
    assert [e.id for e in errors] == ["messaging.E001"]
    assert "'orphan'" in errors[0].msg


def test_check_names_a_missing_after_batch_step(monkeypatch):
    monkeypatch.delitem(registry.AFTER_BATCH, "broadcast")
    assert [e.id for e in registry_check()] == ["messaging.E002"]


def test_check_names_a_missing_stream_reset(monkeypatch):
    monkeypatch.delitem(registry.STREAM_RESETS, "stock_projection")
    assert [e.id for e in registry_check()] == ["messaging.E003"]


def test_check_names_an_unregistered_type_and_a_stray_handler(monkeypatch):
    monkeypatch.setitem(
        registry.SUBSCRIPTIONS,
        "odd",
        registry.Subscription(name="odd", accepts=frozenset({"never_registered"})),
    )
    monkeypatch.setitem(registry.HANDLERS, "odd", lambda message: None)
    monkeypatch.setitem(registry.HANDLERS, "typo", lambda message: None)
    assert [e.id for e in registry_check()] == ["messaging.E005", "messaging.E006"]


def test_manage_check_fails_on_a_missing_handler(monkeypatch):
    monkeypatch.delitem(registry.HANDLERS, "notification")
    with pytest.raises(SystemCheckError, match=r"messaging\.E001"):
        call_command("check")


@pytest.mark.skipif(
    connection.vendor != "sqlite", reason="PostgreSQL claims with SKIP LOCKED"
)
def test_claim_that_loses_a_race_falls_back_to_row_by_row(library_rows, monkeypatch):
    """A batch whose UPDATE moves fewer rows than it read is claimed row by row."""
    from messaging.services import claim

    loan_issue(book_id=1, member_id=1)
    relay_pending()
    taken = Delivery.objects.earliest("id")
    real_candidates = claim._claim_candidates
    calls = []

    def candidates_then_race(due, limit):
        rows = real_candidates(due, limit)
        # Another worker claims one row between our read and our UPDATE (again on the
        # second pass: the rollback of the first undid this stand-in for its commit).
        Delivery.objects.filter(pk=taken.pk).update(
            attempts=1, lease_owner="w0", leased_until=timezone.now() + LEASE
        )
        calls.append(len(rows))
        return rows

    monkeypatch.setattr(claim, "_claim_candidates", candidates_then_race)
    claimed = deliveries_claim(owner="w1", limit=10)
    assert calls == [4, 4]  # the batch, rolled back, then the row-by-row pass
    assert sorted(d.pk for d in claimed) == sorted(
        Delivery.objects.filter(partition__isnull=True)
        .exclude(pk=taken.pk)
        .values_list("pk", flat=True)
    )
    assert Delivery.objects.get(pk=taken.pk).lease_owner == "w0"
    assert set(
        Delivery.objects.filter(partition__isnull=True)
        .exclude(pk=taken.pk)
        .values_list("attempts", flat=True)
    ) == {1}


@pytest.mark.django_db(transaction=True)
def test_broadcasts_of_a_batch_are_sent_once_it_is_processed(library_rows, monkeypatch):
    """Committed broadcast deliveries queue their event; the batch's end sends them."""
    from messaging.services import deliveries_process
    from realtime import broadcast

    sent: list[tuple[str, int, int]] = []

    class Layer:
        async def group_send(self, group, event):
            sent.append((group, event["book"], event["offset"]))

    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: Layer())
    monkeypatch.setattr("messaging.dispatch.nudge_drain", lambda *a, **k: None)
    first = loan_issue(book_id=1, member_id=1)  # book 1 is at branch 2
    second = loan_issue(book_id=2, member_id=1)  # book 2 at branch 1
    relay_pending()
    batch = deliveries_claim(owner="w1", limit=10)
    broadcasts = sorted(
        (d for d in batch if d.subscription == "broadcast"), key=lambda d: d.pk
    )
    assert delivery_process(broadcasts[0], owner="w1").result == "done"
    assert sent == []  # queued after its commit, not sent yet
    rest = [d for d in batch if d.pk != broadcasts[0].pk]
    assert {o.result for o in deliveries_process(rest, owner="w1")} == {"done"}
    offsets = {m.pk for m in OutboxMessage.objects.all()}
    assert sorted(sent) == sorted(
        [("branch-2", 1, min(offsets)), ("branch-1", 2, max(offsets))]
    )
    assert (first.book_id, second.book_id) == (1, 2)
    assert broadcast._pending_broadcasts == []
