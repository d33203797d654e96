"""Live parts of Cache Strategies, Invalidation and Cache Metrics, on the real store.

The live parts read and change committed rows from threads and worker processes, so
the tests use transaction=True and create the branches, books and members they need.
Where a live count does not depend on the machine, it must equal the model's.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from course.labs import cache_strategies
from course.labs import live as harness
from course.labs.base import Lab, Tables
from library.models import Book, Branch

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
    from course.labs.base import LabError

    with pytest.raises(LabError, match="no book #7"):
        live_tables(cache_strategies.LAB)
    assert shelves() == dict.fromkeys(range(1, 7), 5)
    assert harness._children(os.getpid()) == []
