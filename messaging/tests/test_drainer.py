"""The drainer (messaging.drainer): woken by nudges, drains in its own process.

One step at a time here, in the test's process; the drainer as a real process,
SIGKILLed mid-batch and killed by a poison message, is in test_reliability.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_rq import get_queue

from library.models import StockProjection
from library.services import loan_issue
from library.subscribers import stock_project, stock_project_batch
from messaging import dispatch
from messaging.drainer import Drainer
from messaging.errors import PermanentMessageError
from messaging.models import Delivery, OutboxMessage
from messaging.registry import lanes, subscriptions_for
from messaging.services.streams import stream_advance


def wake_ups(client: redis.Redis) -> int:
    return int(client.llen(dispatch.wake_key("main")))


def test_a_live_drainer_is_woken_instead_of_an_rq_job_queued(redis_client):
    drainer = Drainer(redis=redis_client)
    drainer.announce()
    for _ in range(5):
        dispatch.nudge_drain()
    assert wake_ups(redis_client) == 1  # a burst leaves one wake-up
    assert get_queue(dispatch.QUEUE).count == 0
    drainer.retire()
    dispatch.nudge_drain()
    assert get_queue(dispatch.QUEUE).count == 1  # no drainer: the rq fallback


def test_a_drainer_killed_without_goodbye_stops_counting(redis_client):
    # Its announcement has already run out, as one whose process died would have.
    redis_client.zadd(dispatch.DRAINERS_KEY, {"dead:1": 1.0})
    dispatch.nudge_drain()
    assert get_queue(dispatch.QUEUE).count == 1


@pytest.mark.django_db(transaction=True)
def test_a_step_drains_the_loans_its_wake_up_announced(library_rows, redis_client):
    drainer = Drainer(redis=redis_client, block=0.1, gather=0.0)
    drainer.announce()
    for n in range(3):
        loan_issue(book_id=n + 1, member_id=1)  # commits, then nudges
    assert wake_ups(redis_client) == 1
    assert drainer.step() is True
    copies = 3 * len(subscriptions_for("loan_issued"))
    assert Delivery.objects.filter(status="done").count() == copies
    # No lane but main got work (the course's probe lanes take no loans): no other
    # lane's drain was woken for nothing.
    assert lanes()[1:], "the course registers a lane of its own"
    for lane in lanes():
        assert redis_client.llen(dispatch.wake_key(lane)) == 0
    # Nothing committed since: the next step waits out its block, passing nothing.
    passes = drainer.report.passes
    assert drainer.step() is False
    assert drainer.report.passes == passes
    assert get_queue(dispatch.QUEUE).count == 0  # no rq job was ever queued


@pytest.mark.django_db(transaction=True)
def test_a_full_claim_is_followed_by_another_pass(library_rows, redis_client):
    drainer = Drainer(redis=redis_client, block=0.1, gather=0.0, batch=4)
    for n in range(3):
        loan_issue(book_id=n + 1, member_id=1)
    redis_client.lpush(dispatch.wake_key("main"), b"1")
    assert drainer.step() is True
    assert not Delivery.objects.filter(status="pending").exists()
    assert drainer.report.passes > 1


# --- gathering a pass -----------------------------------------------------------------


class Clock:
    """Time as the drainer reads it: moves only when the drainer sleeps."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept = 0.0
        self.during_sleep: list[Callable[[], object]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        while self.during_sleep:
            self.during_sleep.pop(0)()
        self.now += seconds
        self.slept += seconds


def gatherer(client: redis.Redis, clock: Clock, **options) -> Drainer:
    return Drainer(redis=client, gather=0.2, clock=clock, sleep=clock.sleep, **options)


def test_a_pass_soon_after_the_last_one_waits_for_the_gather(redis_client):
    clock = Clock()
    drainer = gatherer(redis_client, clock, batch_goal=3)
    drainer._pass_begins("main", backlog=False)
    clock.now += 0.05
    dispatch.nudge_drain()
    assert drainer.gather_batch("main") is True
    # Until 0.2 s after the last pass began, not 0.2 s after the wake-up.
    assert clock.slept == pytest.approx(0.15, abs=0.021)


def test_a_batch_gathered_early_ends_the_wait(redis_client):
    clock = Clock()
    drainer = gatherer(redis_client, clock, batch_goal=3)
    drainer._pass_begins("main", backlog=False)
    clock.now += 0.05
    dispatch.nudge_drain()
    clock.during_sleep += [dispatch.nudge_drain, dispatch.nudge_drain]
    assert drainer.gather_batch("main") is True
    assert clock.slept == pytest.approx(0.02)  # the third commit ended it


@pytest.mark.parametrize("backlog", [False, True])
def test_a_trickle_or_a_backlog_passes_at_once(redis_client, backlog):
    clock = Clock()
    drainer = gatherer(redis_client, clock)
    drainer._pass_begins("main", backlog=backlog)
    clock.now += 0.01 if backlog else 5.0
    assert drainer.gather_batch("main") is True
    assert clock.slept == 0


@pytest.mark.django_db(transaction=True)
def test_a_wake_up_dropped_while_another_gathers_is_drained_by_its_pass(
    library_rows, redis_client
):
    clock = Clock()
    first = gatherer(redis_client, clock, batch_goal=100)
    second = gatherer(redis_client, clock)
    first.announce()
    first._pass_begins("main", backlog=False)
    loan_issue(book_id=1, member_id=1)
    dropped: list[bool] = []

    def meanwhile() -> None:
        # A commit while the first gathers: its wake-up reaches the second, which
        # leaves it to the pass being gathered.
        loan_issue(book_id=2, member_id=2)
        dropped.append(second.step())

    clock.during_sleep.append(meanwhile)
    assert first.step() is True
    assert dropped == [False]
    copies = 2 * len(subscriptions_for("loan_issued"))
    assert Delivery.objects.filter(status="done").count() == copies
    # The mark went with the pass: the next wake-up is gathered again.
    loan_issue(book_id=3, member_id=3)
    clock.now += 1.0
    assert second.step() is True
    assert Delivery.objects.filter(status="pending").count() == 0


def test_drainer_connection_waits_longer_than_it_blocks():
    # BLPOP must end before the client's socket timeout would cut it off.
    client = redis.Redis.from_url(settings.REDIS_URL)
    timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
    assert timeout is None or timeout > Drainer(redis=client).block


# --- the stock projection's batch ---------------------------------------------------


def _message(pk: int, book: int, version: int, on_shelf: int) -> OutboxMessage:
    body = {
        "book_id": book,
        "branch_id": 1,
        "on_shelf": on_shelf,
        "book_version": version,
    }
    return OutboxMessage(pk=pk, type="loan_issued", key=str(book), body=body)


@pytest.mark.django_db
def test_the_projection_batch_leaves_what_one_message_at_a_time_leaves():
    StockProjection.objects.create(
        book_id=3, branch_id=1, on_shelf=9, book_version=7, offset=1
    )
    batch = [
        _message(10, book=1, version=2, on_shelf=4),
        _message(11, book=1, version=1, on_shelf=5),  # older: never wins
        _message(12, book=2, version=3, on_shelf=1),
        _message(13, book=2, version=3, on_shelf=0),  # a tie: the first stays
        _message(14, book=3, version=6, on_shelf=2),  # below the stored version
        _message(15, book=1, version=4, on_shelf=3),
    ]
    stock_project_batch(batch)
    together = list(StockProjection.objects.values_list())
    StockProjection.objects.all().delete()
    StockProjection.objects.create(
        book_id=3, branch_id=1, on_shelf=9, book_version=7, offset=1
    )
    for message in batch:
        stock_project(message)
    assert together == list(StockProjection.objects.values_list())
    assert together[0] == (1, 1, 3, 4, 15)


@pytest.mark.django_db
def test_a_malformed_message_in_a_projection_batch_is_stepped_past(library_rows):
    for n in range(3):
        loan_issue(book_id=n + 1, member_id=1)
    # Past the stream's grace (PostgreSQL reads only messages a second old).
    OutboxMessage.objects.update(
        created_at=timezone.now() - datetime.timedelta(hours=1)
    )
    bad = OutboxMessage.objects.order_by("id")[1]
    bad.body = {"book_id": "two"}
    bad.save()
    with pytest.raises(PermanentMessageError):
        stock_project(bad)
    while stream_advance("stock_projection"):
        pass
    projected = set(StockProjection.objects.values_list("book_id", flat=True))
    assert projected == {1, 3}


@pytest.mark.django_db(transaction=True)
def test_a_relay_into_another_lane_wakes_that_lanes_drain(redis_client):
    from messaging.services import outbox_publish, subscription_start

    subscription_start("lab_slow")  # the course's subscription in lane "slow"
    with transaction.atomic():
        outbox_publish(type="lab_probe", key="1", body={"n": 1})
    drainer = Drainer(redis=redis_client, block=0.1, gather=0.0)
    drainer.drain("main")  # relays it: copies for lab_probe (main) and lab_slow
    assert redis_client.llen(dispatch.wake_key("slow")) == 1
    assert Delivery.objects.filter(subscription="lab_slow").count() == 1


@pytest.mark.django_db
@pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
    reason="a PostgreSQL setting",
)
def test_a_drainers_connections_commit_without_waiting_for_the_flush() -> None:
    from django.db import connection, connections
    from django.db.backends.signals import connection_created

    from messaging.drainer import _UNFLUSHED_UID, drain_commits_unflushed

    def setting(wrapper: Any) -> str:
        with wrapper.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return str(cursor.fetchone()[0])

    assert setting(connection) == "on"
    fresh = connections.create_connection("default")
    try:
        drain_commits_unflushed()
        # The open connection at once (the test's transaction undoes it), and
        # every connection opened from now on.
        assert setting(connection) == "off"
        assert setting(fresh) == "off"
    finally:
        connection_created.disconnect(dispatch_uid=_UNFLUSHED_UID)
        fresh.close()
