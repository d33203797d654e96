"""The cache-strategies lab: its model against the course and an independent reference,
its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.processes import children
from course.labs import cache_strategies
from course.labs.registry import lab_get
from course.tests.labs import reference_cache_strategies as ref
from course.tests.labs.lab_results import (
    lab_json,
    lab_keys,
    live_tables,
    make_catalogue,
    records,
    rows,
    run,
    shelves,
)
from course.tests.labs.reference import operations

STRATEGIES = "cache-strategies"


def test_cache_strategies_defaults_reproduce_the_course():
    result = run(STRATEGIES)
    assert result["params"] == {
        "ops": 1200,
        "seed": 20250729,
        "write_ratio": 0.15,
        "hot_books": 12,
        "flush_every": 20,
    }
    assert result["tables"]["strategies"]["columns"] == [
        "strategy", "origin_reads", "origin_writes", "hits", "misses", "stale",
        "pending", "diverged",
    ]  # fmt: skip
    # Written as records (column -> value): a swapped column reads as a clear diff.
    assert records(result, "strategies") == [
        {"strategy": "cache-aside", "origin_reads": 156, "origin_writes": 175,
         "hits": 869, "misses": 156, "stale": 0, "pending": 0, "diverged": 0},
        {"strategy": "write-through", "origin_reads": 7, "origin_writes": 175,
         "hits": 1018, "misses": 7, "stale": 0, "pending": 0, "diverged": 0},
        {"strategy": "write-behind", "origin_reads": 7, "origin_writes": 74,
         "hits": 1018, "misses": 7, "stale": 0, "pending": 10, "diverged": 5},
    ]  # fmt: skip


def test_cache_strategies_race_on_book_7():
    race = records(run(STRATEGIES), "race")
    assert [(r["step"], r["cache"], r["origin"]) for r in race] == [
        (1, "-", 3),
        (2, "-", 2),
        (3, 3, 2),
        (4, 3, 2),
    ]
    assert str(race[3]["action"]).startswith("50 of the following 50 reads")


@pytest.mark.parametrize(
    "params",
    [
        {"ops": 0},
        {"ops": 1},
        {"ops": 3000, "seed": 1},
        {"seed": 0, "write_ratio": 0.0},
        {"write_ratio": 1.0, "flush_every": 1},
        {"write_ratio": 0.5, "hot_books": 60, "flush_every": 7},
        {"hot_books": 1, "flush_every": 1000},
        {"seed": 2**31 - 1, "write_ratio": 0.33, "hot_books": 5, "flush_every": 3},
    ],
)
def test_cache_strategies_matches_reference(params):
    lab = lab_get(STRATEGIES)
    full = lab.validate(params)
    assert rows(lab.run(full), "strategies") == ref.strategies(**full)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    ops=st.integers(0, 1500),
    seed=st.integers(0, 2**31 - 1),
    write_ratio=st.floats(0, 1),
    hot_books=st.integers(1, 60),
    flush_every=st.integers(1, 60),
)
def test_cache_strategies_matches_reference_property(**params):
    result = run(STRATEGIES, **params)
    table = rows(result, "strategies")
    assert table == ref.strategies(**params)
    work = operations(
        params["ops"], params["seed"], params["write_ratio"], params["hot_books"]
    )
    reads = sum(1 for kind, _, _ in work if kind == "read")
    aside, through, behind = table
    for _, _, _, hits, misses, stale, _, _ in table:
        assert hits + misses == reads
        assert stale == 0  # one thread: every strategy reflects its own writes
    assert aside[2] == through[2] == len(work) - reads
    assert behind[2] <= through[2]


def test_lab_command_prints_the_strategies_as_json():
    data = lab_json(STRATEGIES, "--set", "flush_every=5")
    assert data["params"]["flush_every"] == 5
    assert data["tables"]["strategies"]["rows"] == ref.strategies(
        1200, 20250729, 0.15, 12, 5
    )


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_cache_strategies_live_refuses_a_catalogue_without_its_books(redis_client):
    make_catalogue(6)
    from course.labs.harness.base import LabError

    with pytest.raises(LabError, match="no book #7"):
        live_tables(cache_strategies.LAB)
    assert shelves() == dict.fromkeys(range(1, 7), 5)
    assert children(os.getpid()) == []
