"""Live parts of the Cache Layers and Hot Key labs, on real daphne processes.

Each live part starts its own daphne instances against this test run's database and
Redis, so the rows they read must be committed (transaction=True). The counts
asserted are the servers' own cache counters, read back from Redis.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import pytest
from django.contrib.auth.models import User

from course.labs.harness import live as harness
from course.labs.harness.base import Tables
from course.labs.registry import lab_get
from library.models import Book, Branch, Member

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def live_tables(slug: str) -> Tables:
    lab = lab_get(slug)
    return lab.run(lab.defaults(), live=True)["tables"]


def rows(tables: Tables, name: str) -> list[list[Any]]:
    return tables[name]["rows"]


def make_library(*, books: int, members: int) -> None:
    branches = [
        Branch.objects.create(pk=pk, name=f"Branch {pk}", city="Izmir")
        for pk in (1, 2, 3, 4)
    ]
    Book.objects.bulk_create(
        Book(title=f"Book {n}", author="Anon", branch=branches[n % 4], on_shelf=2)
        for n in range(1, books + 1)
    )
    Member.objects.bulk_create(
        Member(
            first_name=f"Reader{n}",
            last_name="Test",
            registered_at=datetime.date(2024, 1, 1),
        )
        for n in range(1, members + 1)
    )


def test_cache_layers_live_reaches_the_models_origin_count(redis_client):
    # 20 books, 4 branches and members 1..50: every id the two streams read.
    make_library(books=20, members=50)
    users_before = User.objects.count()

    tables = live_tables("cache-layers")

    # Every request of the uncached run is an origin call; 53 distinct pages.
    assert rows(tables, "live_repetition") == [[600, 53, 600, 547]]
    assert rows(tables, "live_repetition") == rows(tables, "repetition")
    chain = {row[0]: row[1] for row in rows(tables, "live_chain")}
    assert chain["origin"] == 53  # the course's count, made by the real server
    assert sum(chain.values()) == 600
    # The lab's servers keep branch pages fresh longer than any run, so no layer saw
    # an entry expire and each request went to the same layer as in the model.
    server = {row[0]: row[1:] for row in rows(tables, "live_server")}
    assert server["stock"][4] == 0  # no stale branch page was served
    assert rows(tables, "live_chain") == rows(tables, "chain")
    # origin calls per namespace: 20 books, 4 branches, 29 members' histories
    assert [server[n][3] for n in ("book", "stock", "history")] == [20, 4, 29]
    [chain_timing, repetition_timing] = rows(tables, "live_timing")
    assert chain_timing[1] == chain["server"] + chain["origin"]
    assert repetition_timing[1] == 600
    assert User.objects.count() == users_before  # the staff account is gone
    assert harness.child_pids(os.getpid()) == []


def test_hot_key_live_stampede_over_two_daphne_per_side(redis_client):
    make_library(books=4, members=0)

    tables = live_tables("hot-key-and-stampede-effect")

    assert tables["live_stampede"]["columns"] == [
        "strategy", "page", "origin_calls", "waiting_requests",
        "stale_responses", "p50_ms",
    ]  # fmt: skip
    found = {row[0]: row[2:5] for row in rows(tables, "live_stampede")}
    assert list(found) == [row[0] for row in rows(tables, "stampede")]
    # Without the cache every one of the 100 requests goes to the origin.
    assert found["plain"] == [100, 100, 0]
    # Across two processes one request produces the cold page; the others that
    # found nothing waited for it instead of querying.
    origin, waiting, stale = found["single-flight"]
    assert origin == 1
    assert 1 <= waiting <= 100
    assert stale == 0
    # A stale entry answers at once: nobody waits, one refresh reaches the origin.
    origin, waiting, stale = found["stale-while-revalidate"]
    assert (origin, waiting) == (1, 0)
    assert 1 <= stale <= 100
    assert all(row[5] > 0 for row in rows(tables, "live_stampede"))
    assert harness.child_pids(os.getpid()) == []
