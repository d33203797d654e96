"""Group commit: a claim's fresh deliveries commit together, and nobody pays for it.

A group is one transaction for the guard rows, effects and done marks of the fresh
deliveries of one claim. These tests hold its two promises: a group that raises
falls back to one transaction per delivery (only the bad one fails), and a group
whose worker died costs its members no attempt (``Delivery.group_tries``).
"""

import dataclasses

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from library.models import Notification
from library.services import loan_issue
from messaging import registry
from messaging.models import DeadLetter, Delivery, ProcessedMessage
from messaging.selectors.deadletters import deadletter_rows
from messaging.services import deliveries_claim, deliveries_process, relay_pending
from messaging.tests.conftest import LONG_BACKOFF, make_due

pytestmark = pytest.mark.django_db


def _claim_fresh(owner: str = "w1") -> list[Delivery]:
    for book in (1, 2, 3):
        loan_issue(book_id=book, member_id=1)
    relay_pending()
    return deliveries_claim(owner=owner, limit=50)


def test_fresh_deliveries_of_a_claim_commit_as_one_group(library_rows):
    claimed = _claim_fresh()
    grouped = [d for d in claimed if d.group_tries == 1]
    assert len(grouped) >= 6  # three messages, several plain subscriptions each
    with CaptureQueriesContext(connection) as queries:
        outcomes = deliveries_process(claimed, owner="w1")
    assert {o.result for o in outcomes} == {"done"}
    guard_inserts = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("INSERT") and "processedmessage" in q["sql"]
    ]
    # One INSERT for the whole group, one more per delivery run alone.
    assert len(guard_inserts) == 1 + len(claimed) - len(grouped)
    assert ProcessedMessage.objects.count() == len(claimed)
    assert Notification.objects.count() == 3


def _raise(message):
    raise LookupError(f"no member for message {message.pk}")


def test_a_group_that_raises_runs_one_by_one_and_only_the_bad_one_fails(
    library_rows, monkeypatch, steady_jitter
):
    sub = registry.SUBSCRIPTIONS["notification"]
    monkeypatch.setitem(
        registry.SUBSCRIPTIONS,
        "notification",
        dataclasses.replace(sub, backoff=LONG_BACKOFF),
    )
    monkeypatch.setitem(registry.HANDLERS, "notification", _raise)
    claimed = _claim_fresh()
    outcomes = {
        o.delivery_id: o.result for o in deliveries_process(claimed, owner="w1")
    }
    rows = {d.pk: d for d in Delivery.objects.filter(pk__in=outcomes)}
    for pk, result in outcomes.items():
        row = rows[pk]
        if row.subscription == "notification":
            assert (result, row.status, row.failures) == ("retry", "pending", 1)
        else:
            assert (result, row.status, row.failures) == ("done", "done", 0)
        # The failed group's try became each delivery's own: one attempt, no group try.
        assert (row.attempts, row.group_tries) == (1, 0)
    assert not Notification.objects.exists()


def test_a_group_whose_worker_died_costs_no_attempt(library_rows, monkeypatch):
    # One attempt only: a group try counted against it would dead-letter at once.
    for name, sub in list(registry.SUBSCRIPTIONS.items()):
        monkeypatch.setitem(
            registry.SUBSCRIPTIONS, name, dataclasses.replace(sub, max_attempts=1)
        )
    claimed = _claim_fresh()
    assert any(d.group_tries == 1 for d in claimed)
    # The worker dies here, before anything commits: the leases run out.
    make_due(*claimed)
    survivors = deliveries_claim(owner="w2", limit=50)
    # Tried before, so claimed one at a time: a survivor never shares a batch again.
    assert len(survivors) == 1
    (survivor,) = survivors
    assert (survivor.attempts, survivor.group_tries) == (2, 1)
    (outcome,) = deliveries_process(survivors, owner="w2")
    assert outcome.result == "done"
    row = Delivery.objects.get(pk=survivor.pk)
    assert (row.status, row.failures) == ("done", 0)


def test_a_killer_that_died_in_a_group_is_blamed_for_it_once_it_kills_alone(
    library_rows, monkeypatch
):
    for name, sub in list(registry.SUBSCRIPTIONS.items()):
        monkeypatch.setitem(
            registry.SUBSCRIPTIONS, name, dataclasses.replace(sub, max_attempts=3)
        )
    claimed = _claim_fresh()
    assert any(d.group_tries == 1 for d in claimed)
    # The group's worker dies; the first survivor is then claimed alone, and its
    # worker dies as well: one death of its own, so the group's becomes its too.
    make_due(*claimed)
    (killer,) = deliveries_claim(owner="w2", limit=50)
    make_due(killer)
    # The innocent survivors are claimed alone in turn and finish on their first
    # try of their own, until the killer comes round again.
    for turn in range(len(claimed)):
        (again,) = deliveries_claim(owner=f"w{turn + 3}", limit=50)
        if again.pk == killer.pk:
            break
        (done,) = deliveries_process([again], owner=f"w{turn + 3}")
        assert done.result == "done"
    assert again.pk == killer.pk
    assert (again.attempts, again.group_tries, again.failures) == (3, 1, 0)
    (outcome,) = deliveries_process([again], owner=again.lease_owner)
    assert outcome.result == "dead"
    row = Delivery.objects.get(pk=killer.pk)
    assert row.status == "dead"
    letter = DeadLetter.objects.get(delivery=row)
    assert "died during 2 earlier attempt(s)" in letter.last_error
    (annotated,) = deadletter_rows(DeadLetter.objects.filter(pk=letter.pk))
    assert annotated.worker_deaths == 2  # type: ignore[attr-defined]  # annotated
    assert not ProcessedMessage.objects.filter(
        subscription=row.subscription, message_id=row.message_id
    ).exists()
