"""Live parts of Cache Strategies, Invalidation and Cache Metrics, on the real store.

The live parts read and change committed rows from threads and worker processes, so
the tests use transaction=True and create the branches, books and members they need.
Where a live count does not depend on the machine, it must equal the model's.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import pytest

from course.labs import cache_metrics, cache_strategies, invalidation
from course.labs.harness import live as harness
from course.labs.harness.base import Lab, Tables
from library.models import Book, Branch, Loan, Member

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def live_tables(lab: Lab, **overrides: Any) -> Tables:
    return lab.run(lab.validate(overrides), live=True)["tables"]


def rows(tables: Tables, name: str) -> list[list[Any]]:
    return tables[name]["rows"]


def make_catalogue(books: int, *, on_shelf: int = 5) -> list[Branch]:
    branches = [
        Branch.objects.create(pk=pk, name=f"Branch {pk}", city="Ankara")
        for pk in (1, 2, 3, 4)
    ]
    Book.objects.bulk_create(
        Book(
            pk=n,
            title=f"Book {n}",
            author=f"Author {n % 7}",
            branch=branches[n % 4],
            on_shelf=on_shelf,
        )
        for n in range(1, books + 1)
    )
    return branches


def shelves() -> dict[int, int]:
    return dict(Book.objects.values_list("pk", "on_shelf"))


def lab_keys(redis_client) -> list[bytes]:
    return list(redis_client.scan_iter(match="lab:*")) + list(
        redis_client.scan_iter(match="sf:lab:*")
    )


def test_cache_strategies_live_counts_equal_the_model_and_race_needs_the_version(
    redis_client,
):
    make_catalogue(12)  # five copies each: the lab starts from three, then restores
    before = shelves()

    tables = live_tables(cache_strategies.LAB)

    assert tables["live_strategies"]["columns"] == tables["strategies"]["columns"]
    # Real calls on Redis and the database reach the model's counts exactly.
    assert rows(tables, "live_strategies") == rows(tables, "strategies")
    assert [r[1:3] for r in rows(tables, "live_strategies")] == [
        [156, 175],
        [7, 175],
        [7, 74],
    ]
    assert rows(tables, "live_race_outcome") == [
        ["plain key", 50, 50, 0],  # the old value stays and is served every time
        ["version in the key", 50, 0, 1],  # A's store lands under a dead key
    ]
    race = rows(tables, "live_race")
    assert [(r[0], r[3], r[4]) for r in race] == [
        ("plain key", "-", 3),
        ("plain key", "-", 2),
        ("plain key", 3, 2),
        ("plain key", 3, 2),
        ("version in the key", "-", 3),
        ("version in the key", "-", 2),
        ("version in the key", "-", 2),
        ("version in the key", 2, 2),
    ]
    assert shelves() == before  # every shelf count is put back
    assert lab_keys(redis_client) == []  # the run's entries and dirty hash are gone


def test_cache_strategies_live_refuses_a_catalogue_without_its_books(redis_client):
    make_catalogue(6)
    from course.labs.harness.base import LabError

    with pytest.raises(LabError, match="no book #7"):
        live_tables(cache_strategies.LAB)
    assert shelves() == dict.fromkeys(range(1, 7), 5)
    assert harness.child_pids(os.getpid()) == []


def test_invalidation_live_lifetime_waits_event_follows_the_worker_version_never_stale(
    redis_client,
):
    from library.cache.reads import LIST, branch_tenant
    from library.cache.store import generation_get
    from messaging.models import Delivery

    make_catalogue(8)
    before = shelves()

    tables = live_tables(invalidation.LAB)

    assert tables["live_invalidation"]["columns"] == [
        "invalidation", "reads", "hits", "misses", "stale", "delay_ms",
    ]  # fmt: skip
    by_label = {row[0]: row[1:] for row in rows(tables, "live_invalidation")}
    assert list(by_label) == [
        "time (lifetime=2 s)",
        "event (outbox, rq worker)",
        "version (book_detail)",
    ]
    after_fresh = invalidation.LIVE_READS_AFTER_FRESH
    for reads, hits, misses, stale, delay_ms in by_label.values():
        # Every read before the first fresh one was stale; once fresh, it stays so.
        assert reads == stale + 1 + after_fresh
        assert misses == 1  # the reload that brought the new count
        assert hits == reads - 1
        assert delay_ms is not None
    time_row, event_row, version_row = by_label.values()
    # The entry was stored just before the change and lives two seconds.
    assert time_row[3] > 0
    assert 200 <= time_row[4] <= 2500
    assert version_row[3] == 0  # the version moved the key: never stale
    assert event_row[4] < time_row[4]
    # The worker's delivery retired the page: the branch's generation moved.
    book_branch = Book.objects.get(pk=1).branch_id
    assert generation_get(LIST.namespace, branch_tenant(book_branch)) > 1
    invalidations = Delivery.objects.filter(subscription="cache_invalidation")
    assert invalidations.filter(status=Delivery.Status.DONE).count() >= 2
    assert shelves() == before
    assert lab_keys(redis_client) == []
    assert harness.child_pids(os.getpid()) == []


def test_cache_metrics_live_counts_equal_the_model_and_history_costs_book_hits(
    redis_client,
):
    make_catalogue(70)
    joined = datetime.date(2024, 1, 1)
    members = Member.objects.bulk_create(
        Member(first_name=f"M{n}", last_name="Reader", registered_at=joined)
        for n in range(1, 201)
    )
    Loan.objects.bulk_create(
        Loan(
            book_id=n % 70 + 1,
            member=members[n % 200],
            pickup_date=datetime.date(2024, 2, 1) + datetime.timedelta(days=n % 30),
        )
        for n in range(600)
    )

    tables = live_tables(cache_metrics.LAB)

    # Hits, misses, evictions and origin calls, as the application's metrics
    # counted them on the real LocalTier, are the model's.
    assert [r[:6] for r in rows(tables, "live_capacity")] == rows(tables, "capacity")
    assert rows(tables, "live_namespaces") == rows(tables, "namespaces")
    assert rows(tables, "live_without_history") == rows(tables, "without_history")
    [book_row] = [r for r in rows(tables, "live_namespaces") if r[0] == "book"]
    full_book = book_row[4]
    [[lean_book, lean_evictions, lean_origin]] = rows(tables, "live_without_history")
    assert (full_book, lean_book) == (69.9, 90.7)  # history out, book ratio up
    assert (lean_evictions, lean_origin) == (77, 449)
    [[request_pct, byte_pct, hit_bytes, miss_bytes, origin]] = rows(
        tables, "live_totals"
    )
    assert request_pct == rows(tables, "totals")[0][0] == 62.8
    assert origin == 743
    assert hit_bytes > 0
    assert miss_bytes > 0
    assert byte_pct == round(hit_bytes / (hit_bytes + miss_bytes) * 100, 1)
    # The run's private metric namespaces are gone from the application's metrics.
    names = {n.decode() for n in redis_client.smembers("cachemetrics:namespaces")}
    assert not [name for name in names if name.startswith("lab-")]
    assert not list(redis_client.scan_iter(match="cachemetrics:lab-*"))


def test_cache_metrics_live_needs_two_hundred_members(redis_client):
    from course.labs.harness.base import LabError

    make_catalogue(60)
    with pytest.raises(LabError, match="needs 200 members, the database has 0"):
        live_tables(cache_metrics.LAB)
