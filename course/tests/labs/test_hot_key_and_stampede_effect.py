"""The hot-key-and-stampede-effect lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.processes import children
from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from course.tests.labs import reference_hot_key_and_stampede_effect as ref
from course.tests.labs.lab_results import (
    columns,
    lab_json,
    live_tables,
    make_library,
    rows,
    run,
)

HOT = "hot-key-and-stampede-effect"


def test_hot_key_defaults_reproduce_the_course():
    result = run(HOT)
    assert result["params"] == {
        "requests": 100,
        "origin_delay_ms": 30,
        "keys": 200,
        "lifetime": 100,
        "jitter": 40,
        "shard_requests": 1000,
        "shards": 4,
        "copies": [4, 8],
    }
    assert columns(result, "stampede") == [
        "strategy",
        "origin_calls",
        "pending_requests",
        "stale_responses",
    ]
    assert rows(result, "stampede") == [
        ["plain", 100, 100, 0],
        ["single-flight", 1, 100, 0],
        ["stale-while-revalidate", 1, 0, 100],
    ]
    # the course's duration column, measured on the virtual clock
    assert rows(result, "duration") == [
        ["plain", 30],
        ["single-flight", 30],
        ["stale-while-revalidate", 0],
    ]
    assert columns(result, "expiry") == [
        "lifetime",
        "expiry_steps",
        "highest_miss_in_step",
    ]
    assert rows(result, "expiry") == [
        ["fixed lifetime", 1, 200],
        ["jittered lifetime", 40, 9],
    ]
    assert columns(result, "shards") == [
        "distribution",
        "busiest_pct",
        "shard_0",
        "shard_1",
        "shard_2",
        "shard_3",
    ]
    assert rows(result, "shards") == [
        ["single key", 68.4, 102, 684, 108, 106],
        ["split into 4 copies", 40.8, 102, 234, 408, 256],
        ["split into 8 copies", 33.3, 102, 309, 333, 256],
    ]


HOT_DEFAULTS: dict[str, Any] = {
    "requests": 100,
    "origin_delay_ms": 30,
    "keys": 200,
    "lifetime": 100,
    "jitter": 40,
    "shard_requests": 1000,
    "shards": 4,
    "copies": [4, 8],
}


def check_hot_key(params: dict[str, Any]) -> None:
    full = {**HOT_DEFAULTS, **params}
    result = run(HOT, **full)
    expected = ref.hot_key(**full)
    for name in ("stampede", "duration", "expiry", "shards"):
        assert rows(result, name) == expected[name], name


@pytest.mark.parametrize(
    "params",
    [
        {"requests": 0},
        {"requests": 1, "origin_delay_ms": 0},
        {"requests": 7, "origin_delay_ms": 250},
        {"keys": 1, "jitter": 0},
        {"keys": 1000, "lifetime": 5, "jitter": 7},
        {"jitter": 1},
        {"shards": 1, "copies": [1]},
        {"shards": 7, "copies": [2, 3, 16], "shard_requests": 37},
        {"shards": 16, "copies": [64], "shard_requests": 5000},
    ],
)
def test_hot_key_matches_reference_for_other_values(params):
    check_hot_key(params)


@settings(max_examples=25, deadline=None)
@given(
    requests=st.integers(0, 60),
    origin_delay_ms=st.integers(0, 10_000),
    keys=st.integers(1, 400),
    lifetime=st.integers(1, 1000),
    jitter=st.integers(0, 500),
    shard_requests=st.integers(1, 600),
    shards=st.integers(1, 12),
    copies=st.lists(st.integers(1, 40), min_size=1, max_size=3),
)
def test_hot_key_matches_reference_property(**params):
    check_hot_key(params)


def test_stampede_runs_on_a_virtual_clock():
    started = time.monotonic()
    result = run(HOT, origin_delay_ms=3_600_000, requests=50)
    assert time.monotonic() - started < 5
    assert rows(result, "duration")[0] == ["plain", 3_600_000]
    assert rows(result, "stampede")[0] == ["plain", 50, 50, 0]


def test_command_sets_shards_and_copies():
    shards = lab_json(HOT, "--set", "shards=3", "--set", "copies=2,5")["tables"][
        "shards"
    ]
    assert shards["columns"][2:] == ["shard_0", "shard_1", "shard_2"]
    assert [row[0] for row in shards["rows"]] == [
        "single key",
        "split into 2 copies",
        "split into 5 copies",
    ]
    assert all(sum(row[2:]) == 1000 for row in shards["rows"])


def test_hot_key_stored_params_are_checked_by_type():
    with pytest.raises(ParamError):
        lab_get(HOT).validate({"shards": 2.0})


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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
    assert children(os.getpid()) == []
