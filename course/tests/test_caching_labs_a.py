"""cache-strategies, invalidation and cache-key-design: the course's tables, a second
implementation for other parameter values, and the parameter checks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from course.tests import reference_caching_a as ref
from course.tests.lab_results import (
    assert_charts_name_numeric_columns,
    lab_json,
    records,
    rows,
    run,
)
from library.cache.keys import cache_key

STRATEGIES = "cache-strategies"
INVALIDATION = "invalidation"
KEY_DESIGN = "cache-key-design"


# --- the numbers the course prints --------------------------------------------------


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


def generated(operation: str, tenant: str, **criteria: Any) -> str:
    return cache_key(
        namespace="library",
        operation=operation,
        tenant=tenant,
        generation=4,
        criteria=criteria,
    )


def test_cache_key_design_keys_come_from_the_system_generator():
    result = run(KEY_DESIGN)
    keys = [key for _, key in rows(result, "keys")]
    assert keys == [
        generated("search", "branch-2", title="Sand", author="Borges"),
        generated("search", "branch-2", title="Sand: Borges", author=""),
        generated("list", "branch-2", page=1),
        generated("list", "branch-3", page=1),
        generated("search", "branch-1", author="Atay", title="The Disconnected"),
        generated("search", "branch-1", title="The Disconnected", author="Atay"),
        keys[6],
    ]
    # the printed forms, glued from pieces so the test does not quote the lesson
    head = "library:s1:g4:t"
    assert keys[1] == head + "branch-2:search:title=Sand%3A%20Borges"
    assert keys[3] == head + "branch-3:list:page=1"
    assert keys[6] == head + "branch-1:search:c_648d4755bc125b8e"
    assert rows(result, "checks") == [
        ["both orders give one key", "yes"],
        ["length of the summarised key", 49],
    ]


def test_cache_key_design_collision_and_leak():
    result = run(KEY_DESIGN)
    found = [(r["key"], r["source"], r["result"]) for r in records(result, "collision")]
    sand, selection = "The Book of Sand", "Sand: Borges Selection"
    branch_2, branch_3 = "The Book of Sand, Yaban", "Silent House, Motherland Hotel"
    assert found == [
        ("search:Sand:Borges", "origin", sand),
        ("search:Sand:Borges", "cache", sand),  # B is handed A's answer
        (
            generated("search", "branch-2", title="Sand", author="Borges"),
            "origin",
            sand,
        ),
        (generated("search", "branch-2", title="Sand: Borges"), "origin", selection),
        ("list:page:1", "origin", branch_2),
        ("list:page:1", "cache", branch_2),  # branch 3 is shown branch 2's shelf
        (generated("list", "branch-2", page=1), "origin", branch_2),
        (generated("list", "branch-3", page=1), "origin", branch_3),
    ]
    assert rows(result, "leak") == [[2, 2, branch_2]]


def test_cache_key_design_cardinality_reproduces_the_course():
    result = run(KEY_DESIGN)
    assert result["params"] == {"requests": 400}
    assert result["tables"]["cardinality"]["columns"] == [
        "key_form", "hits", "misses", "ratio_pct", "wrong", "entries",
    ]  # fmt: skip
    assert records(result, "cardinality") == [
        {"key_form": "correct (tenant + criteria)", "hits": 394, "misses": 6,
         "ratio_pct": 98.5, "wrong": 0, "entries": 6},
        {"key_form": "extra field (request id)", "hits": 0, "misses": 400,
         "ratio_pct": 0, "wrong": 0, "entries": 400},
        {"key_form": "missing field (no tenant)", "hits": 398, "misses": 2,
         "ratio_pct": 99.5, "wrong": 200, "entries": 2},
    ]  # fmt: skip


# --- other parameter values against the second implementation -------------------------


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
    work = ref.operations(
        params["ops"], params["seed"], params["write_ratio"], params["hot_books"]
    )
    reads = sum(1 for kind, _, _ in work if kind == "read")
    aside, through, behind = table
    for _, _, _, hits, misses, stale, _, _ in table:
        assert hits + misses == reads  # type: ignore[operator]
        assert stale == 0  # one thread: every strategy reflects its own writes
    assert aside[2] == through[2] == len(work) - reads
    assert behind[2] <= through[2]  # type: ignore[operator]


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


@pytest.mark.parametrize("requests", [0, 1, 5, 6, 7, 32, 800, 999, 12_000])
def test_cache_key_design_cardinality_matches_reference(requests):
    result = run(KEY_DESIGN, requests=requests)
    assert rows(result, "cardinality") == ref.cardinality(requests)


@settings(max_examples=30, deadline=None)
@given(requests=st.integers(0, 3000))
def test_cache_key_design_cardinality_property(requests):
    assert rows(run(KEY_DESIGN, requests=requests), "cardinality") == (
        ref.cardinality(requests)
    )


def test_no_requests_gives_null_ratios():
    table = rows(run(KEY_DESIGN, requests=0), "cardinality")
    assert [row[3] for row in table] == [None, None, None]


# --- parameters, progress, the command ------------------------------------------------


@pytest.mark.parametrize(
    ("slug", "name", "text", "reason"),
    [
        (STRATEGIES, "hot_books", "61", "hot_books: must be at most 60"),
        (STRATEGIES, "hot_books", "0", "hot_books: must be at least 1"),
        (STRATEGIES, "flush_every", "0", "flush_every: must be at least 1"),
        (STRATEGIES, "write_ratio", "1.5", "write_ratio: must be at most 1"),
        (STRATEGIES, "write_ratio", "-0.1", "write_ratio: must be at least 0"),
        (STRATEGIES, "ops", "-1", "ops: must be at least 0"),
        (STRATEGIES, "seed", "x", "seed: 'x' is not a whole number"),
        (INVALIDATION, "delays", "5,0", "delays: must be at least 1"),
        (INVALIDATION, "lifetimes", "-1", "lifetimes: must be at least 0"),
        (INVALIDATION, "lifetimes", "1,2,3,4,5,6,7,8,9", "lifetimes: at most 8 values"),
        (KEY_DESIGN, "requests", "-1", "requests: must be at least 0"),
        (KEY_DESIGN, "requests", "1000001", "requests: must be at most 100000"),
    ],
)
def test_bad_values_are_rejected_with_one_line(slug, name, text, reason):
    with pytest.raises(ParamError) as info:
        lab_get(slug).resolve({name: text})
    assert str(info.value).startswith(reason)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("slug", [STRATEGIES, INVALIDATION, KEY_DESIGN])
def test_progress_is_reported_in_order(slug):
    seen: list[float] = []
    lab = lab_get(slug)
    lab.run(lab.defaults(), progress=lambda fraction, label: seen.append(fraction))
    assert len(seen) >= 4
    assert seen == sorted(seen)
    assert seen[-1] == 1.0


@pytest.mark.parametrize("slug", [STRATEGIES, INVALIDATION, KEY_DESIGN])
def test_charts_name_existing_numeric_columns(slug):
    assert_charts_name_numeric_columns(slug)


def test_lab_command_prints_the_strategies_as_json():
    data = lab_json(STRATEGIES, "--set", "flush_every=5")
    assert data["params"]["flush_every"] == 5
    assert data["tables"]["strategies"]["rows"] == ref.strategies(
        1200, 20250729, 0.15, 12, 5
    )
