"""The cache-layers lab: its model against the course and an independent reference, its
live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import datetime
import os

import pytest
from django.contrib.auth.models import User
from hypothesis import given, settings
from hypothesis import strategies as st

from config.processes import children
from course.labs.registry import lab_get
from course.tests.labs import reference_cache_layers as reference
from course.tests.labs.lab_results import live_tables, make_library, rows, run
from library.seed import seed_library


def test_cache_layers_defaults_reproduce_the_course():
    result = run("cache-layers")
    assert result["params"] == {
        "requests": 600,
        "users": 40,
        "seed": 20250729,
        "client_capacity": 4,
        "edge_capacity": 10,
        "server_capacity": 200,
    }
    assert result["tables"]["repetition"] == {
        "columns": ["requests", "unique_keys", "origin_queries", "repeat_queries"],
        "rows": [[600, 53, 600, 547]],
    }
    chain = result["tables"]["chain"]
    assert chain["columns"] == ["layer", "requests", "share_pct"]
    assert [row[0] for row in chain["rows"]] == ["client", "edge", "server", "origin"]
    assert [row[1] for row in chain["rows"]] == [98, 189, 260, 53]
    assert [row[2] for row in chain["rows"]] == [16.3, 31.5, 43.3, 8.8]


@pytest.mark.parametrize(
    "params",
    [
        {"requests": 0},
        {"requests": 1},
        {"requests": 5000, "users": 7},
        {"seed": 0, "client_capacity": 1, "edge_capacity": 1, "server_capacity": 1},
        {"seed": 2**31 - 1, "users": 1},
        {"seed": 12345, "edge_capacity": 40, "server_capacity": 5},
        {"requests": 2500, "users": 300, "seed": 777, "client_capacity": 30},
    ],
)
def test_cache_layers_matches_reference_for_other_values(params):
    lab = lab_get("cache-layers")
    full = lab.validate(params)
    expected = reference.cache_layers(**full)  # type: ignore[arg-type]
    result = lab.run(full)
    assert rows(result, "repetition") == expected["repetition"]
    assert rows(result, "chain") == expected["chain"]


@settings(max_examples=40, deadline=None)
@given(
    requests=st.integers(0, 1500),
    users=st.integers(1, 120),
    seed=st.integers(0, 2**31 - 1),
    client_capacity=st.integers(1, 12),
    edge_capacity=st.integers(1, 40),
    server_capacity=st.integers(1, 300),
)
def test_cache_layers_matches_reference_property(**params):
    lab = lab_get("cache-layers")
    expected = reference.cache_layers(**params)
    result = lab.run(lab.validate(params))
    assert rows(result, "repetition") == expected["repetition"]
    assert rows(result, "chain") == expected["chain"]
    assert sum(int(row[1] or 0) for row in rows(result, "chain")) == params["requests"]


def test_cache_layers_with_no_requests_prints_null_shares():
    result = run("cache-layers", requests=0)
    assert [row[2] for row in rows(result, "chain")] == [None] * 4


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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
    assert children(os.getpid()) == []


TODAY = datetime.date(2026, 3, 16)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_cache_layers_live_reaches_the_models_counts_on_the_demo_library(
    redis_client,
):
    seed_library(today=TODAY)

    tables = live_tables("cache-layers")

    assert rows(tables, "live_repetition") == rows(tables, "repetition")
    assert rows(tables, "live_chain") == rows(tables, "chain")
    assert children(os.getpid()) == []
