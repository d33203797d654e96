"""Publish-subscribe states, partitioned order, stream consumers, replay, retention."""

from __future__ import annotations

import datetime
import random
import threading
import time
from dataclasses import replace

import pytest
from django.db import connection, transaction
from django.utils import timezone

from library import subscribers
from library.models import Book, BookLedger, StockProjection
from library.services import loan_issue, stock_correct
from messaging import registry
from messaging.models import (
    DeadLetter,
    Delivery,
    LogRetention,
    OutboxMessage,
    PartitionLease,
    StreamConsumer,
    SubscriptionState,
)
from messaging.registry import SUBSCRIPTIONS, MessageType
from messaging.services import (
    messaging_drain,
    outbox_publish,
    partitions,
    relay_pending,
    streams,
    subscription_start,
    work_remaining,
)
from messaging.services.streams import (
    RewindError,
    log_trim,
    offset_before,
    stream_advance,
    stream_rewind,
    streams_behind,
)
from messaging.tests.conftest import LONG_BACKOFF, make_due

pytestmark = pytest.mark.django_db
PROJECTION = "stock_projection"


@pytest.fixture(autouse=True)
def no_commit_grace(request, monkeypatch):
    """Read messages at once (PostgreSQL's grace is tested on its own below)."""
    if "grace" not in request.node.name:
        monkeypatch.setattr(streams, "STREAM_GRACE", datetime.timedelta(0))


def probe(seq: int, **extra: object) -> OutboxMessage:
    with transaction.atomic():
        return outbox_publish(
            type="lab_probe",  # the course registers it
            key=seq,
            body={"run": "depth", "seq": seq, **extra},
        )


def copies(subscription: str) -> int:
    return Delivery.objects.filter(subscription=subscription).count()


# --- publish-subscribe ------------------------------------------------------------


def test_a_paused_subscription_gets_no_copies_and_the_others_are_unchanged(
    library_rows,
):
    probe(1)
    relay_pending()
    assert (copies("lab_probe"), copies("lab_late"), copies("lab_slow")) == (1, 0, 0)
    subscription_start("notification", active=False)
    loan_issue(book_id=1, member_id=1)
    relay_pending()
    assert copies("notification") == 0
    assert copies("stock_summary") == copies("broadcast") == 1


def test_a_late_subscriber_sees_only_what_is_published_after_it(library_rows):
    for seq in (1, 2, 3):
        probe(seq)
    relay_pending()
    state = subscription_start("lab_late")
    assert state.starts_after == OutboxMessage.objects.latest("id").pk
    probe(4)
    probe(5)
    relay_pending()
    late = Delivery.objects.filter(subscription="lab_late")
    assert sorted(d.message.body["seq"] for d in late) == [4, 5]
    assert copies("lab_probe") == 5  # the others kept every message


def test_a_subscription_met_for_the_first_time_starts_after_the_relayed_past(
    library_rows,
):
    probe(1)
    relay_pending()
    SubscriptionState.objects.filter(name="lab_probe").delete()  # "deployed" now
    probe(2)
    relay_pending()
    state = SubscriptionState.objects.get(name="lab_probe")
    assert state.starts_after == OutboxMessage.objects.earliest("id").pk
    assert [d.message.body["seq"] for d in Delivery.objects.filter(
        subscription="lab_probe"
    ).order_by("id")] == [1, 2]  # fmt: skip


def test_a_slow_lane_is_drained_apart_from_the_main_lane(library_rows):
    subscription_start("lab_slow")
    for seq in range(3):
        probe(seq, slow_ms=1)
    relay_pending()
    messaging_drain(owner="main", budget_seconds=30)
    assert Delivery.objects.filter(subscription="lab_probe", status="done").count() == 3
    assert (
        Delivery.objects.filter(subscription="lab_slow", status="pending").count() == 3
    )
    assert work_remaining(lane="slow")
    messaging_drain(owner="slow", budget_seconds=30, lane="slow")
    assert not Delivery.objects.filter(status="pending").exists()


# --- partitions ---------------------------------------------------------------------


def test_a_partition_is_worked_by_one_lease_holder_at_a_time(library_rows):
    stock_correct(book_id=1, on_shelf=5)  # book 1 -> partition 1 of 4
    stock_correct(book_id=2, on_shelf=5)  # book 2 -> partition 2
    relay_pending()
    partitions._ensure_leases(SUBSCRIPTIONS["book_ledger"])
    held = timezone.now() + datetime.timedelta(seconds=30)
    PartitionLease.objects.filter(subscription="book_ledger", partition=1).update(
        owner="w0", leased_until=held
    )
    messaging_drain(owner="w1", budget_seconds=30)
    ledger = Delivery.objects.filter(subscription="book_ledger")
    assert dict(ledger.values_list("partition", "status")) == {1: "pending", 2: "done"}
    assert partitions.partition_loads("book_ledger") == [0, 1, 0, 0]
    PartitionLease.objects.filter(partition=1).update(leased_until=None)  # expired
    messaging_drain(owner="w1", budget_seconds=30)
    assert set(ledger.values_list("status", flat=True)) == {"done"}


def test_each_partition_counts_every_delivery_it_processed_once(
    library_rows, monkeypatch
):
    # Turns of two: counted by the renewals inside a turn, the rest by the release.
    monkeypatch.setattr(partitions, "PARTITION_TURN", 2)
    assert not PartitionLease.objects.exists()  # created by the first failed take
    for on_shelf in range(1, 6):
        stock_correct(book_id=1, on_shelf=on_shelf)  # partition 1: five in a row
    stock_correct(book_id=2, on_shelf=2)  # partition 2: one alone
    messaging_drain(owner="w1", budget_seconds=30)
    ledger = Delivery.objects.filter(subscription="book_ledger")
    assert set(ledger.values_list("status", flat=True)) == {"done"}
    processed = PartitionLease.objects.filter(subscription="book_ledger")
    assert dict(processed.values_list("partition", "processed")) == {
        0: 0,
        1: 5,
        2: 1,
        3: 0,
    }
    assert not processed.exclude(owner="").exists()  # every lease given back


def test_a_malformed_head_blocks_its_partition_until_it_is_dead_lettered(
    library_rows, monkeypatch, steady_jitter
):
    ledger = replace(SUBSCRIPTIONS["book_ledger"], backoff=LONG_BACKOFF)
    monkeypatch.setitem(SUBSCRIPTIONS, "book_ledger", ledger)
    with transaction.atomic():  # book 1's partition, but no version: cannot apply
        outbox_publish(
            type=MessageType.STOCK_CORRECTED,
            key=1,
            body={"book_id": 1, "branch_id": 2, "on_shelf": 1},
        )
    stock_correct(book_id=1, on_shelf=4)
    stock_correct(book_id=5, on_shelf=4)  # same partition (5 mod 4 = 1)
    messaging_drain(owner="w1", budget_seconds=30)
    # The head failed once and waits for its retry; the two behind it wait with it.
    assert BookLedger.objects.count() == 0
    assert partitions.partition_loads("book_ledger")[1] == 3
    for _ in range(3):
        make_due(*Delivery.objects.filter(subscription="book_ledger", status="pending"))
        messaging_drain(owner="w1", budget_seconds=30)
    letter = DeadLetter.objects.get(subscription="book_ledger")
    assert "book_version" in letter.last_error
    assert list(BookLedger.objects.values_list("book_id", flat=True)) == [1, 5]


@pytest.mark.django_db(transaction=True)
def test_in_book_order_holds_under_several_drains_with_random_delays(
    library_rows, monkeypatch
):
    """Four drains at once, each effect delayed at random: no book ever inverts."""
    monkeypatch.setattr("messaging.dispatch.nudge_drain", lambda *a, **k: None)
    real_append = subscribers.ledger_append
    rng = random.Random(20250720)

    def slow_append(message):
        time.sleep(rng.uniform(0, 0.004))
        real_append(message)

    monkeypatch.setitem(registry.HANDLERS, "book_ledger", slow_append)
    changes = 48
    for n in range(changes):
        stock_correct(book_id=n % 6 + 1, on_shelf=n % 5 + 1)
    errors: list[BaseException] = []

    def drain(worker: int) -> None:
        try:
            for _ in range(200):
                messaging_drain(owner=f"w{worker}", budget_seconds=5)
                pending = Delivery.objects.filter(
                    subscription="book_ledger", status="pending"
                )
                if not pending.exists():
                    return
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=drain, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert BookLedger.objects.count() == changes
    assert not BookLedger.objects.filter(in_order=False).exists()
    for book in range(1, 7):
        versions = list(
            BookLedger.objects.filter(book_id=book)
            .order_by("id")
            .values_list("book_version", flat=True)
        )
        assert versions == sorted(versions)
        assert len(versions) == changes // 6


# --- streams ------------------------------------------------------------------------


def live_shelves(book_ids):
    return dict(Book.objects.filter(pk__in=book_ids).values_list("pk", "on_shelf"))


def projected():
    return dict(StockProjection.objects.values_list("book_id", "on_shelf"))


def catch_up() -> None:
    while stream_advance(PROJECTION):
        pass


def test_the_projection_follows_the_log_and_its_offset(library_rows):
    loan_issue(book_id=1, member_id=1)
    stock_correct(book_id=2, on_shelf=9)
    probe(1)  # read past, not applied: the projection only accepts library types
    catch_up()
    consumer = StreamConsumer.objects.get(name=PROJECTION)
    assert consumer.offset == OutboxMessage.objects.latest("id").pk
    assert consumer.applied_total == 3
    assert projected() == live_shelves([1, 2]) == {1: 2, 2: 9}
    assert not streams_behind()


def test_replay_from_the_start_rebuilds_an_equal_projection(
    library_rows, django_user_model
):
    staff_user = django_user_model.objects.create_user("desk", is_staff=True)
    for n in range(12):
        stock_correct(book_id=n % 6 + 1, on_shelf=n + 1)
        if n % 4 == 0:
            loan_issue(book_id=n % 6 + 1, member_id=1)
    catch_up()
    before = projected()
    assert before == live_shelves(range(1, 7))
    StockProjection.objects.filter(book_id=3).update(on_shelf=999)  # damaged
    consumer = stream_rewind(PROJECTION, offset=0, rebuild=True, user=staff_user)
    assert (consumer.offset, consumer.rewound_to) == (0, 0)
    assert consumer.rewound_by == staff_user
    assert projected() == {}
    catch_up()
    assert projected() == before


def test_a_failing_batch_moves_neither_offset_nor_projection(library_rows, monkeypatch):
    stock_correct(book_id=1, on_shelf=7)
    stock_correct(book_id=2, on_shelf=8)
    real = subscribers.stock_project

    def fails_on_book_2(message):
        if message.body["book_id"] == 2:
            raise RuntimeError("projection store unavailable")
        real(message)

    monkeypatch.setitem(registry.STREAM_HANDLERS, PROJECTION, fails_on_book_2)
    assert stream_advance(PROJECTION) == 0
    consumer = StreamConsumer.objects.get(name=PROJECTION)
    assert (consumer.offset, consumer.state) == (0, "failing")
    assert "projection store unavailable" in consumer.last_error
    assert projected() == {}  # book 1's effect rolled back with the offset
    monkeypatch.setitem(registry.STREAM_HANDLERS, PROJECTION, real)
    catch_up()
    assert projected() == {1: 7, 2: 8}


def test_rewinding_by_time_starts_at_the_first_message_after_it(library_rows):
    stock_correct(book_id=1, on_shelf=1)
    middle = timezone.now()
    later = stock_correct(book_id=1, on_shelf=2)
    first_after = OutboxMessage.objects.filter(key=str(later.pk)).latest("id").pk
    assert offset_before(middle) == first_after - 1
    assert offset_before(timezone.now() + datetime.timedelta(hours=1)) == first_after


def drained_history(count: int) -> list[int]:
    for n in range(count):
        stock_correct(book_id=n % 6 + 1, on_shelf=n + 1)
    messaging_drain(owner="w1", budget_seconds=30)
    return list(OutboxMessage.objects.order_by("id").values_list("id", flat=True))


def test_retention_trims_a_prefix_and_stops_a_consumer_it_overtook(
    library_rows, settings
):
    ids = drained_history(8)
    StreamConsumer.objects.update_or_create(name=PROJECTION, defaults={"offset": 2})
    settings.MESSAGING_RETENTION_MESSAGES = 3
    report = log_trim()
    assert (report.trimmed, report.earliest_offset) == (5, ids[5])
    assert list(OutboxMessage.objects.values_list("id", flat=True)) == ids[5:]
    assert report.consumers_cut == [PROJECTION]
    consumer = StreamConsumer.objects.get(name=PROJECTION)
    assert consumer.state == "trimmed"
    assert f"starts at {ids[5]}" in consumer.last_error
    assert stream_advance(PROJECTION) == 0  # it stops rather than skip the hole
    assert StreamConsumer.objects.get(name=PROJECTION).offset == 2
    assert LogRetention.objects.get().trimmed_total == 5
    with pytest.raises(RewindError, match="lowest offset to rewind to is"):
        stream_rewind(PROJECTION, offset=ids[3], rebuild=False)
    with pytest.raises(RewindError, match="a rebuild replays the whole kept log"):
        stream_rewind(PROJECTION, offset=ids[6], rebuild=True)
    stream_rewind(PROJECTION, offset=ids[5] - 1, rebuild=True)
    catch_up()
    assert StreamConsumer.objects.get(name=PROJECTION).state == "ok"


def test_retention_never_trims_past_an_unfinished_delivery(library_rows, settings):
    ids = drained_history(6)
    Delivery.objects.filter(message_id=ids[2], subscription="broadcast").update(
        status="pending"
    )
    settings.MESSAGING_RETENTION_MESSAGES = 1
    report = log_trim()
    assert (report.trimmed, report.held_by, report.earliest_offset) == (
        2,
        ids[2],
        ids[2],
    )
    assert OutboxMessage.objects.earliest("id").pk == ids[2]


def test_retention_by_age(library_rows, settings):
    ids = drained_history(4)
    old = timezone.now() - datetime.timedelta(days=40)
    OutboxMessage.objects.filter(pk__in=ids[:3]).update(created_at=old)
    settings.MESSAGING_RETENTION_DAYS = 30
    assert log_trim().trimmed == 3
    assert list(OutboxMessage.objects.values_list("id", flat=True)) == ids[3:]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only")
def test_on_postgresql_a_consumer_waits_out_the_commit_grace(library_rows):
    stock_correct(book_id=1, on_shelf=3)
    assert stream_advance(PROJECTION) == 0  # younger than the grace: not read yet
    OutboxMessage.objects.update(created_at=timezone.now() - datetime.timedelta(2))
    assert stream_advance(PROJECTION) == 1


def test_a_one_at_a_time_lane_refuses_a_second_drain(library_rows, redis_client):
    from messaging import tasks

    subscription_start("lab_slow")
    probe(1, slow_ms=0)
    relay_pending()
    redis_client.set(tasks.running_key("slow"), "other")  # a drain of the lane runs
    assert tasks.drain(lane="slow") == {}
    assert Delivery.objects.get(subscription="lab_slow").status == "pending"
    redis_client.delete(tasks.running_key("slow"))
    assert tasks.drain(lane="slow")["done"] == 1
    assert not redis_client.exists(tasks.running_key("slow"))


def test_a_drain_that_ends_never_frees_the_next_drains_lease(
    library_rows, redis_client, monkeypatch
):
    """The lease is owner-checked: a successor that took over keeps it."""
    from messaging import tasks

    subscription_start("lab_slow")
    probe(1, slow_ms=0)
    relay_pending()
    real_drain = messaging_drain

    def drain_then_lose_the_lease(**kwargs):
        report = real_drain(**kwargs)
        # Say this drain's lease ran out while it worked, and the next one took it.
        redis_client.set(tasks.running_key("slow"), "the next drain")
        return report

    monkeypatch.setattr("messaging.tasks.messaging_drain", drain_then_lose_the_lease)
    assert tasks.drain(lane="slow")["done"] == 1
    assert redis_client.get(tasks.running_key("slow")) == b"the next drain"


@pytest.mark.django_db(transaction=True)
def test_a_subscriptions_slow_part_runs_outside_its_transaction(
    library_rows, monkeypatch
):
    """The slow lane's wait must not hold the database (SQLite's one write lock)."""
    seen: list[bool] = []
    monkeypatch.setattr("messaging.dispatch.nudge_drain", lambda *a, **k: None)
    monkeypatch.setitem(
        registry.OUTSIDE,
        "lab_slow",
        lambda message: seen.append(connection.in_atomic_block),
    )
    subscription_start("lab_slow")
    probe(1, slow_ms=1)
    relay_pending()
    messaging_drain(owner="slow", budget_seconds=30, lane="slow")
    assert seen == [False]  # and the effect itself ran inside one (below)
    assert Delivery.objects.get(subscription="lab_slow").status == "done"


def test_a_stream_steps_past_a_message_it_can_never_apply(library_rows):
    stock_correct(book_id=1, on_shelf=4)
    with transaction.atomic():  # no version: the projection cannot use it, ever
        bad = outbox_publish(
            type=MessageType.STOCK_CORRECTED,
            key=2,
            body={"book_id": 2, "branch_id": 1, "on_shelf": 1},
        )
    stock_correct(book_id=3, on_shelf=6)
    catch_up()
    consumer = StreamConsumer.objects.get(name=PROJECTION)
    assert consumer.offset == OutboxMessage.objects.latest("id").pk
    assert consumer.state == "ok"
    assert f"stepped past message {bad.pk}" in consumer.last_error
    assert projected() == {1: 4, 3: 6}  # before and after it, both applied
