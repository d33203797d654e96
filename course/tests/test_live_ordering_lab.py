"""Live part of the ordering-and-partitioning lab, on real rq worker processes.

Competing rq jobs with random delays invert a book's events; the real, partitioned
``book_ledger`` subscription never does. The live part starts its own workers
against this test run's database and Redis, so the data must be committed
(transaction=True).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from course.labs import ordering_and_partitioning as ordering
from course.labs.harness import live as harness
from course.labs.harness.base import LabError, Tables
from course.labs.registry import lab_get
from library.models import Book, BookLedger, Branch
from messaging.models import DeadLetter

SLUG = "ordering-and-partitioning"


def live_tables(**overrides: Any) -> Tables:
    lab = lab_get(SLUG)
    return lab.run(lab.validate(overrides), live=True)["tables"]


def records(tables: Tables, name: str) -> list[dict[str, Any]]:
    columns = tables[name]["columns"]
    return [dict(zip(columns, row, strict=True)) for row in tables[name]["rows"]]


def loads(text: str) -> list[int]:
    return [int(n) for n in text.split()]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_competing_workers_invert_a_book_the_partitioned_ledger_never(redis_client):
    # 30 events over 3 books: the model's 4 competing workers invert 9 same-book
    # pairs, so the live run with random delays cannot plausibly invert none.
    tables = live_tables(events=30, books=3, workers=[1, 4])

    one, four = records(tables, "live_competing")
    assert (one["workers"], four["workers"]) == (1, 4)
    assert one["workers_used"] == 1
    assert (one["global_inversions"], one["in_key_inversions"]) == (0, 0)
    assert four["workers_used"] > 1
    assert four["in_key_inversions"] > 0
    assert four["model_in_key_inversions"] == 9
    assert four["duration_s"] < one["duration_s"]

    [part] = records(tables, "live_partitioned")
    assert (part["partitions"], part["workers"], part["events"]) == (4, 4, 30)
    assert part["in_key_inversions"] == 0
    assert part["ledger_out_of_order"] == 0
    # The real router put every event on the partition the model predicts.
    assert part["partition_events"] == part["model_partition_events"]
    assert sum(loads(part["partition_events"])) == 30

    [hot] = records(tables, "live_hot_key")
    assert hot["hot_book"] == ordering.HOT_BOOK
    assert hot["hot_share_pct"] > 50
    assert hot["hot_partition"] == hot["busiest_partition"]
    assert hot["hot_partition"] == hot["hot_book_id"] % 4
    assert hot["partition_events"] == hot["model_partition_events"]
    assert (hot["in_key_inversions"], hot["ledger_out_of_order"]) == (0, 0)

    # One bad change at a partition's head: what queued behind it waited for its
    # attempts; the other partitions did not.
    [blocking] = records(tables, "live_head_of_line")
    assert blocking["blocked_events"] == 6
    assert (blocking["head_attempts"], blocking["head_outcome"]) == (3, "dead letter")
    assert blocking["average_wait_ms"] > blocking["alone_average_wait_ms"]

    # Nothing of the run is left: its books, ledger rows, workers and Redis keys.
    assert not Book.objects.filter(title__startswith="Lab ordering").exists()
    assert not Branch.objects.filter(name__startswith="Lab ordering").exists()
    assert not BookLedger.objects.exists()
    assert not DeadLetter.objects.exists()
    assert harness.child_pids(os.getpid()) == []
    assert not list(redis_client.scan_iter(match="*lab-live-*"))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"events": 401}, "at most 400 events"),
        ({"hot_events": 401}, "at most 400 events"),
        ({"books": 61}, "at most 60 books"),
        ({"workers": [1, 5]}, "at most 4 workers"),
    ],
)
def test_live_limits_are_refused_before_anything_starts(overrides, reason):
    with pytest.raises(LabError, match=reason):
        live_tables(**overrides)
    assert not Book.objects.exists()
    assert harness.child_pids(os.getpid()) == []


def test_live_inversions_count_pairs_of_one_book_apart():
    events = [ordering.Event(order, book, 1) for order, book in enumerate([1, 2, 1])]
    # applied 2, 1, 0: every pair is inverted; only (0, 2) is one book's pair
    assert ordering.live_inversions([2, 1, 0], events) == (3, 1)
    assert ordering.live_inversions([1, 0, 2], events) == (1, 0)


def test_expected_partition_events_route_by_book_modulo():
    events = [ordering.Event(order, book, 1) for order, book in enumerate([1, 5, 4])]
    assert ordering.expected_partition_events(events, 4) == [1, 2, 0, 0]


def test_competing_job_records_its_event_in_finish_order(redis_client):
    key = ordering.applied_key("t" * 10, 2)
    assert key.startswith(harness.PRIVATE_QUEUE_PREFIX)
    ordering.competing_apply(key, 5, 0)
    ordering.competing_apply(key, 3, 0)
    assert redis_client.lrange(key, 0, -1) == [b"5", b"3"]
    assert 0 < redis_client.ttl(key) <= ordering.APPLIED_TTL_S
