"""The admin's read-only queries: per-subscription counts, lag, dead-letter clusters."""

import datetime

import pytest
from django.utils import timezone

from library.models import Book
from library.services import loan_issue
from messaging import registry
from messaging.models import DeadLetter, Delivery, OutboxMessage
from messaging.selectors import (
    dead_letter_clusters,
    dead_letter_open_count,
    messaging_overview,
    outbox_lag,
    subscription_counts,
)
from messaging.services import dead_letter_redrive, messaging_drain, relay_pending

pytestmark = pytest.mark.django_db

NOTIFY_ERROR = "LookupError: member {} not found"
# What the clusters group by: the error with the member's number taken out.
NOTIFY_SIGNATURE = "LookupError: member <n> not found"
BROADCAST_ERROR = "ConnectionError: channel layer unreachable"


def failing_notify(message):
    raise LookupError(f"member {message.body['member_id']} not found")


def failing_broadcast(message):
    raise ConnectionError("channel layer unreachable")


def break_subscribers(monkeypatch):
    """Make notification and broadcast fail, and give up after one attempt."""
    for name, handler in (
        ("notification", failing_notify),
        ("broadcast", failing_broadcast),
    ):
        sub = registry.SUBSCRIPTIONS[name]
        monkeypatch.setitem(
            registry.SUBSCRIPTIONS,
            name,
            registry.Subscription(name=name, accepts=sub.accepts, max_attempts=1),
        )
        monkeypatch.setitem(registry.HANDLERS, name, handler)


def issue_and_drain(*members: int) -> None:
    """Issue one loan per member id (books in turn), then drain everything."""
    Book.objects.update(on_shelf=50)
    for n, member_id in enumerate(members):
        loan_issue(book_id=n % 6 + 1, member_id=member_id)
    messaging_drain(owner="test-worker", budget_seconds=30)


def test_counts_list_every_subscription_even_without_deliveries(library_rows):
    counts = subscription_counts()
    assert [c.name for c in counts] == list(registry.SUBSCRIPTIONS)
    assert {(c.pending, c.due, c.dead) for c in counts} == {(0, 0, 0)}


def test_counts_list_a_retired_subscription_found_in_the_data(library_rows):
    loan_issue(book_id=1, member_id=1)
    relay_pending()
    Delivery.objects.filter(subscription="broadcast").update(subscription="retired")
    names = [c.name for c in subscription_counts()]
    assert names == [*registry.SUBSCRIPTIONS, "retired"]


def test_counts_split_pending_due_and_dead(library_rows, monkeypatch):
    break_subscribers(monkeypatch)
    issue_and_drain(1, 2)
    loan_issue(book_id=3, member_id=3)
    relay_pending()
    # One fresh delivery backs off into the future: pending but not due.
    later = timezone.now() + datetime.timedelta(minutes=5)
    Delivery.objects.filter(subscription="broadcast", status="pending").update(
        available_at=later
    )
    counts = {c.name: (c.pending, c.due, c.dead) for c in subscription_counts()}
    assert counts["notification"] == (1, 1, 2)
    assert counts["stock_summary"] == (1, 1, 0)
    assert counts["broadcast"] == (1, 0, 2)


def test_lag_measures_oldest_unrelayed_message_and_oldest_due_delivery(library_rows):
    loan_issue(book_id=1, member_id=1)
    loan_issue(book_id=2, member_id=1)
    now = timezone.now()
    OutboxMessage.objects.filter(pk=OutboxMessage.objects.earliest("id").pk).update(
        created_at=now - datetime.timedelta(minutes=7)
    )
    lag = outbox_lag(now=now)
    assert lag.unrelayed == 2
    assert lag.oldest_unrelayed == datetime.timedelta(minutes=7)
    assert lag.oldest_due is None

    relay_pending()
    Delivery.objects.update(available_at=now - datetime.timedelta(seconds=90))
    Delivery.objects.filter(subscription="broadcast").update(
        available_at=now - datetime.timedelta(minutes=3)
    )
    lag = outbox_lag(now=now)
    assert (lag.unrelayed, lag.oldest_unrelayed) == (0, None)
    assert lag.oldest_due == datetime.timedelta(minutes=3)


def test_lag_ignores_deliveries_that_are_done_or_not_due(library_rows):
    loan_issue(book_id=1, member_id=1)
    messaging_drain(owner="test-worker", budget_seconds=30)
    assert outbox_lag().oldest_due is None


def test_clusters_group_open_letters_by_subscription_and_error(
    library_rows, monkeypatch
):
    break_subscribers(monkeypatch)
    # Four loans, three members: the notifications fail naming members 1 and 2, the
    # same failure, one cluster.
    issue_and_drain(1, 1, 2, 1)
    now = timezone.now()
    oldest = DeadLetter.objects.filter(subscription="notification").earliest("id")
    DeadLetter.objects.filter(pk=oldest.pk).update(
        last_failed_at=now - datetime.timedelta(hours=2)
    )
    clusters = dead_letter_clusters(now=now)
    assert [(c.subscription, c.signature, c.count) for c in clusters] == [
        ("notification", NOTIFY_SIGNATURE, 4),
        ("broadcast", BROADCAST_ERROR, 4),
    ]
    assert clusters[0].example in {NOTIFY_ERROR.format(n) for n in (1, 2)}
    assert clusters[0].oldest == datetime.timedelta(hours=2)
    assert clusters[1].oldest < datetime.timedelta(minutes=1)


def test_redriven_letters_leave_their_cluster_and_the_open_count(
    library_rows, monkeypatch, django_user_model
):
    break_subscribers(monkeypatch)
    issue_and_drain(2, 2)
    assert dead_letter_open_count() == 4
    operator = django_user_model.objects.create_user("op", is_staff=True)
    notify_ids = DeadLetter.objects.filter(subscription="notification")
    dead_letter_redrive(ids=notify_ids.values_list("id", flat=True), user=operator)
    assert dead_letter_open_count() == 2
    assert [(c.subscription, c.count) for c in dead_letter_clusters()] == [
        ("broadcast", 2)
    ]


def test_overview_combines_open_count_counts_and_lag(library_rows, monkeypatch):
    break_subscribers(monkeypatch)
    issue_and_drain(3)
    overview = messaging_overview()
    assert overview.open_dead_letters == 2
    dead = {c.name: c.dead for c in overview.subscriptions}
    assert (dead["notification"], dead["stock_summary"], dead["broadcast"]) == (1, 0, 1)
    assert overview.lag.unrelayed == 0
