"""The invalidation lab: its model against the course and an independent reference, its
live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.processes import children
from course.labs import invalidation
from course.labs.registry import lab_get
from course.tests.labs import reference_invalidation as ref
from course.tests.labs.lab_results import (
    lab_keys,
    live_tables,
    make_catalogue,
    records,
    rows,
    run,
    shelves,
)
from library.models import Book

INVALIDATION = "invalidation"


def test_invalidation_defaults_reproduce_the_course():
    result = run(INVALIDATION)
    assert result["params"] == {
        "ops": 1200,
        "seed": 20250729,
        "lifetimes": [10, 50, 200],
        "delays": [5, 25],
    }
    assert result["tables"]["invalidation"]["columns"] == [
        "invalidation", "origin_reads", "hits", "misses", "stale",
    ]  # fmt: skip
    assert records(result, "invalidation") == [
        {"invalidation": "time (lifetime=10)", "origin_reads": 626, "hits": 399,
         "misses": 626, "stale": 18},
        {"invalidation": "time (lifetime=50)", "origin_reads": 232, "hits": 793,
         "misses": 232, "stale": 147},
        {"invalidation": "time (lifetime=200)", "origin_reads": 72, "hits": 953,
         "misses": 72, "stale": 445},
        {"invalidation": "event (delay=5)", "origin_reads": 155, "hits": 870,
         "misses": 155, "stale": 14},
        {"invalidation": "event (delay=25)", "origin_reads": 153, "hits": 872,
         "misses": 153, "stale": 97},
        {"invalidation": "version", "origin_reads": 156, "hits": 869,
         "misses": 156, "stale": 0},
    ]  # fmt: skip
    assert result["tables"]["orphans"] == {
        "columns": ["entries", "orphaned"],
        "rows": [[4, 3]],
    }
    states = [state for _, state in rows(result, "orphan_keys")]
    assert states == ["orphaned"] * 3 + ["reachable"]


@pytest.mark.parametrize(
    "params",
    [
        {"ops": 0},
        {"ops": 1, "lifetimes": [0], "delays": [1]},
        {"ops": 2500, "seed": 99},
        {"lifetimes": [1, 2, 3, 1000], "delays": [1, 2, 100]},
        {"seed": 0, "lifetimes": [7, 7], "delays": [3]},
        {"seed": 2**31 - 1, "ops": 800, "lifetimes": [25], "delays": [10, 50]},
    ],
)
def test_invalidation_matches_reference(params):
    lab = lab_get(INVALIDATION)
    full = lab.validate(params)
    assert rows(lab.run(full), "invalidation") == ref.invalidation(**full)  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None)
@given(
    ops=st.integers(0, 1500),
    seed=st.integers(0, 2**31 - 1),
    lifetimes=st.lists(st.integers(0, 400), min_size=1, max_size=3),
    delays=st.lists(st.integers(1, 60), min_size=1, max_size=2),
)
def test_invalidation_matches_reference_property(**params):
    table = rows(run(INVALIDATION, **params), "invalidation")
    assert table == ref.invalidation(**params)
    version = table[-1]
    assert version[0] == "version"
    assert version[4] == 0  # a changed book is asked for under a new key


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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
    assert children(os.getpid()) == []
