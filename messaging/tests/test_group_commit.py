"""Group commit: a claim's fresh deliveries commit together, and nobody pays for it.

A group is one transaction for the guard rows, effects and done marks of the fresh
deliveries of one claim. These tests hold its two promises: a group that raises
falls back to one transaction per delivery (only the bad one fails), and a group
whose worker died costs its members no attempt (``Delivery.group_tries``).
"""

import dataclasses
import datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from library.models import Book, BookLedger, BranchStock, Notification
from library.services import loan_issue
from messaging import registry
from messaging.models import (
    DeadLetter,
    Delivery,
    OutboxMessage,
    PartitionLease,
    ProcessedMessage,
)
from messaging.selectors.dead_letters import dead_letter_rows
from messaging.services import (
    deliveries_claim,
    deliveries_process,
    messaging_drain,
    outbox_publish,
    partitions,
    relay_pending,
    streams,
)
from messaging.services.partitions import partitions_drain
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
    # The group handlers leave what the one-message handlers would: a note per
    # loan naming its book, and each branch's totals recounted from its books.
    notes = Notification.objects.order_by("source_message_id")
    assert [n.text for n in notes] == [
        f"You borrowed “Book {n}”. Enjoy the read!" for n in (1, 2, 3)
    ]
    for summary in BranchStock.objects.all():
        books = Book.objects.filter(branch_id=summary.branch_id)
        assert summary.on_shelf_total == sum(b.on_shelf for b in books)
        assert summary.titles == books.count()
        newest = OutboxMessage.objects.filter(body__branch_id=summary.branch_id)
        assert summary.last_message_id == max(m.pk for m in newest)
    # One INSERT of the group's notifications, not one per loan.
    notes_sql = [
        q["sql"] for q in queries.captured_queries if "library_notification" in q["sql"]
    ]
    assert sum(sql.startswith("INSERT") for sql in notes_sql) == 1


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
    (annotated,) = dead_letter_rows(DeadLetter.objects.filter(pk=letter.pk))
    assert annotated.worker_deaths == 2  # type: ignore[attr-defined]  # annotated
    assert not ProcessedMessage.objects.filter(
        subscription=row.subscription, message_id=row.message_id
    ).exists()


def _publish(*keys_and_bodies: tuple[int, dict[str, object] | None]) -> None:
    """Publish loans (a body of None) or bare messages keyed by book, and relay them."""
    for key, body in keys_and_bodies:
        if body is None:
            loan_issue(book_id=key, member_id=1)
        else:
            with transaction.atomic():
                outbox_publish(
                    type=registry.MessageType.LOAN_ISSUED, key=key, body=body
                )
    relay_pending()


def _ledger_partition(
    *keys_and_bodies: tuple[int, dict[str, object] | None],
) -> list[Delivery]:
    """Publish messages whose book_ledger copies share partition 1; return them."""
    _publish(*keys_and_bodies)
    ledger = Delivery.objects.filter(subscription="book_ledger").order_by("message_id")
    assert {d.partition for d in ledger} == {1}
    return list(ledger)


def _turns() -> None:
    deadline = timezone.now() + datetime.timedelta(seconds=30)
    partitions_drain(owner="w1", lane="main", deadline=deadline)


def test_a_partitions_fresh_run_commits_as_one_group_in_order(library_rows):
    # A version already recorded above book 5's next one: that entry is out of order.
    BookLedger.objects.create(book_id=5, message_id=0, book_version=99, kind="x")
    first, second = _ledger_partition((1, None), (5, None))
    with CaptureQueriesContext(connection) as queries:
        _turns()
    rows = Delivery.objects.filter(pk__in=[first.pk, second.pk]).order_by("message_id")
    assert [(r.status, r.attempts, r.group_tries) for r in rows] == [
        ("done", 1, 1),
        ("done", 1, 1),
    ]
    entries = BookLedger.objects.filter(message_id__gt=0).order_by("message_id")
    assert [(e.book_id, e.in_order) for e in entries] == [(1, True), (5, False)]
    # One guard INSERT for the run, not one per delivery.
    guards = [q for q in queries.captured_queries if "processedmessage" in q["sql"]]
    assert sum(q["sql"].startswith("INSERT") for q in guards) == 1


def test_a_run_that_fails_is_given_back_and_the_partition_stops_at_the_bad_one(
    library_rows,
):
    good, bad, later = _ledger_partition((1, None), (1, {"loan": "??"}), (5, None))
    _turns()
    good, bad, later = (Delivery.objects.get(pk=d.pk) for d in (good, bad, later))
    # Given back, then one by one: the good head is done, the bad one waits for its
    # retry, and the one behind it has not run: order holds, no attempt was lost.
    assert (good.status, good.attempts, good.group_tries) == ("done", 1, 0)
    assert (bad.status, bad.attempts, bad.failures, bad.group_tries) == (
        "pending",
        1,
        1,
        0,
    )
    assert (later.status, later.attempts, later.group_tries) == ("pending", 0, 0)
    assert (later.lease_owner, later.leased_until) == ("", None)
    assert list(BookLedger.objects.values_list("book_id", flat=True)) == [1]


def test_a_failed_run_goes_one_by_one_up_to_its_end_not_regrouped(library_rows, caplog):
    *goods, bad, later = _ledger_partition(
        (1, None), (5, None), (1, None), (1, {"loan": "??"}), (5, None)
    )
    caplog.set_level("INFO", logger="messaging")
    _turns()
    # One group try for the run; then each of its members alone, so the bad one
    # is rolled back once, not once more for every good one in front of it.
    fallbacks = [r for r in caplog.records if "fell back to one by one" in r.message]
    assert len(fallbacks) == 1
    states = [Delivery.objects.get(pk=d.pk) for d in (*goods, bad, later)]
    assert [(d.status, d.attempts, d.failures) for d in states] == [
        ("done", 1, 0),
        ("done", 1, 0),
        ("done", 1, 0),
        ("pending", 1, 1),
        ("pending", 0, 0),
    ]


def test_a_backlog_drains_in_under_three_statements_per_message(
    library_rows, monkeypatch
):
    # What docs/architecture.md's figure is measured by: 200 loans of six books,
    # one drain in one process, every statement counted (the stream read at once).
    monkeypatch.setattr(streams, "STREAM_GRACE", datetime.timedelta(0))
    Book.objects.update(on_shelf=1000)
    for n in range(200):
        loan_issue(book_id=n % 6 + 1, member_id=n % 3 + 1)
    with CaptureQueriesContext(connection) as queries:
        report = messaging_drain(owner="w1", budget_seconds=60)
    assert (report.relayed, report.done, report.streamed) == (200, 1000, 200)
    # 2.7 here, one of them the projection's UPDATE; 7.9 with a claim of 20 and a
    # query per partition head on every pass.
    assert len(queries.captured_queries) / 200 < 3


def _ledger_heads(
    *keys_and_bodies: tuple[int, dict[str, object] | None],
) -> dict[int, Delivery]:
    """Publish messages keyed by book; their book_ledger copies by id."""
    _publish(*keys_and_bodies)
    ledger = Delivery.objects.filter(subscription="book_ledger").order_by("message_id")
    return {d.pk: d for d in ledger}


def test_heads_of_several_partitions_commit_as_one_group(library_rows):
    # Books 1, 2 and 3: partitions 1, 2 and 3, one fresh head each.
    copies = _ledger_heads((1, None), (2, None), (3, None))
    assert len({d.partition for d in copies.values()}) == 3
    with CaptureQueriesContext(connection) as queries:
        _turns()
    rows = Delivery.objects.filter(pk__in=copies)
    assert {(r.status, r.attempts, r.group_tries) for r in rows} == {("done", 1, 1)}
    assert sorted(BookLedger.objects.values_list("book_id", flat=True)) == [1, 2, 3]
    # One lease statement, one claim, one guard INSERT, one release for the three.
    sql = [q["sql"] for q in queries.captured_queries]
    guards = [s for s in sql if "processedmessage" in s and s.startswith("INSERT")]
    assert len(guards) == 1
    leases = PartitionLease.objects.filter(subscription="book_ledger")
    assert sorted(leases.values_list("partition", "processed", "owner")) == [
        (0, 0, ""),
        (1, 1, ""),
        (2, 1, ""),
        (3, 1, ""),
    ]
    assert len(sql) <= 18, len(sql)  # 16 here; a turn each took 41 for the three


def test_the_runs_behind_the_heads_commit_in_the_heads_group_in_order(library_rows):
    # Books 1 and 5 share partition 1, book 2 is partition 2: one group for all
    # four, each partition in offset order, no turn and no second read after it.
    BookLedger.objects.create(book_id=5, message_id=0, book_version=99, kind="x")
    copies = _ledger_heads((1, None), (2, None), (5, None), (1, None))
    partitions._ensure_leases(registry.SUBSCRIPTIONS["book_ledger"])
    with CaptureQueriesContext(connection) as queries:
        _turns()
    rows = Delivery.objects.filter(pk__in=copies)
    assert {(r.status, r.attempts, r.group_tries) for r in rows} == {("done", 1, 1)}
    entries = BookLedger.objects.filter(message_id__gt=0).order_by("message_id")
    assert [(e.book_id, e.in_order) for e in entries] == [
        (1, True),
        (2, True),
        (5, False),
        (1, True),
    ]
    leases = PartitionLease.objects.filter(subscription="book_ledger")
    assert sorted(leases.values_list("partition", "processed", "owner")) == [
        (0, 0, ""),
        (1, 3, ""),
        (2, 1, ""),
        (3, 0, ""),
    ]
    sql = [q["sql"] for q in queries.captured_queries]
    assert sum("messaging_partitionlease" in s for s in sql) == 3  # read, take, free
    assert sum(s.startswith(("BEGIN", "SAVEPOINT")) for s in sql) == 1


def test_what_the_heads_read_cut_off_takes_its_turn_after_the_group(
    library_rows, monkeypatch
):
    monkeypatch.setattr(partitions, "RUN_READ", 2)
    copies = _ledger_heads((1, None), (1, None), (1, None), (2, None))
    _turns()
    rows = Delivery.objects.filter(pk__in=copies).order_by("message_id")
    assert [(r.status, r.attempts) for r in rows] == [("done", 1)] * 4
    leases = PartitionLease.objects.filter(subscription="book_ledger")
    assert dict(leases.values_list("partition", "processed")) == {
        0: 0,
        1: 3,
        2: 1,
        3: 0,
    }
    assert list(BookLedger.objects.order_by("message_id").values_list("book_id")) == [
        (1,),
        (1,),
        (1,),
        (2,),
    ]


def test_a_group_of_heads_that_fails_is_given_back_and_each_takes_its_turn(
    library_rows,
):
    copies = _ledger_heads((1, None), (2, {"loan": "??"}), (3, None), (1, None))
    _turns()
    rows = Delivery.objects.filter(pk__in=copies).select_related("message")
    states = [
        (d.message.key, d.status, d.attempts, d.failures)
        for d in rows.order_by("message_id")
    ]
    # Given back as it was (no attempt lost), then one partition at a time: book
    # 2's bad head waits for its retry alone; book 1 (both, in order) and 3 are done.
    assert states == [
        ("1", "done", 1, 0),
        ("2", "pending", 1, 1),
        ("3", "done", 1, 0),
        ("1", "done", 1, 0),
    ]
    ledger = list(BookLedger.objects.order_by("message_id").values_list("book_id"))
    assert ledger == [(1,), (3,), (1,)]
