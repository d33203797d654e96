"""The cache-metrics lab: its model against the course and an independent reference,
its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs import cache_metrics
from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from course.tests.labs import reference_cache_metrics as ref
from course.tests.labs.lab_results import (
    columns,
    live_tables,
    make_catalogue,
    records,
    rows,
    run,
)
from library.models import Loan, Member
from library.seed import seed_library

METRICS = "cache-metrics"


def test_cache_metrics_defaults_reproduce_the_course():
    result = run(METRICS)
    assert result["params"] == {
        "requests": 2000,
        "seed": 20250729,
        "capacities": [4, 8, 16, 32, 64, 128],
        "breakdown_capacity": 64,
    }
    assert result["tables"]["capacity"] == {
        "columns": [
            "capacity",
            "hits",
            "misses",
            "hit_ratio_pct",
            "evictions",
            "origin_queries",
        ],
        "rows": [
            [4, 133, 1867, 6.7, 1863, 1867],
            [8, 289, 1711, 14.4, 1703, 1711],
            [16, 588, 1412, 29.4, 1396, 1412],
            [32, 1053, 947, 52.6, 915, 947],
            [64, 1851, 149, 92.5, 85, 149],
            [128, 1932, 68, 96.6, 0, 68],
        ],
    }
    assert columns(result, "namespaces") == [
        "namespace",
        "requests",
        "hits",
        "misses",
        "hit_ratio_pct",
    ]
    assert records(result, "namespaces") == [
        {"namespace": "book", "requests": 1380, "hits": 965, "misses": 415,
         "hit_ratio_pct": 69.9},
        {"namespace": "stock", "requests": 202, "hits": 189, "misses": 13,
         "hit_ratio_pct": 93.6},
        {"namespace": "list", "requests": 110, "hits": 84, "misses": 26,
         "hit_ratio_pct": 76.4},
        {"namespace": "history", "requests": 308, "hits": 19, "misses": 289,
         "hit_ratio_pct": 6.2},
    ]  # fmt: skip
    assert result["tables"]["totals"] == {
        "columns": [
            "request_hit_ratio_pct",
            "byte_hit_ratio_pct",
            "hit_bytes",
            "miss_bytes",
            "origin_queries",
        ],
        "rows": [[62.8, 51.7, 283673, 264714, 743]],
    }
    assert result["tables"]["without_history"] == {
        "columns": ["book_hit_ratio_pct", "evictions", "origin_queries"],
        "rows": [[90.7, 77, 449]],
    }
    # "(previously: 679)": the eviction count with histories cached
    assert rows(result, "evictions") == [["yes", 679], ["no", 77]]


def check_metrics(params: dict[str, Any]) -> None:
    full = {
        "requests": 2000,
        "seed": 20250729,
        "capacities": [4, 8, 16, 32, 64, 128],
        "breakdown_capacity": 64,
        **params,
    }
    result = run(METRICS, **full)
    expected = ref.cache_metrics(**full)
    for name in ("capacity", "namespaces", "totals", "without_history"):
        assert rows(result, name) == expected[name], name


@pytest.mark.parametrize(
    "params",
    [
        {"requests": 0},
        {"requests": 1, "capacities": [1]},
        {"requests": 900, "seed": 0, "breakdown_capacity": 1},
        {"seed": 2**31 - 1, "capacities": [2, 68, 69, 300]},
        {"requests": 3000, "seed": 42, "breakdown_capacity": 268},
    ],
)
def test_cache_metrics_matches_reference_for_other_values(params):
    check_metrics(params)


@settings(max_examples=15, deadline=None)
@given(
    requests=st.integers(0, 700),
    seed=st.integers(0, 2**31 - 1),
    capacities=st.lists(st.integers(1, 150), min_size=1, max_size=3),
    breakdown_capacity=st.integers(1, 300),
)
def test_cache_metrics_matches_reference_property(**params):
    check_metrics(params)


def test_cache_metrics_without_requests_prints_null_ratios():
    result = run(METRICS, requests=0, capacities=[4])
    assert rows(result, "capacity") == [[4, 0, 0, None, 0, 0]]
    assert rows(result, "totals") == [[None, None, 0, 0, 0]]
    assert all(row[4] is None for row in rows(result, "namespaces"))


def test_cache_metrics_stored_params_are_checked_by_type():
    with pytest.raises(ParamError):
        lab_get(METRICS).validate({"capacities": [4, "8"]})


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
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


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_cache_metrics_live_needs_two_hundred_members(redis_client):
    from course.labs.harness.base import LabError

    make_catalogue(60)
    with pytest.raises(LabError, match="needs 200 members, the database has 0"):
        live_tables(cache_metrics.LAB)


TODAY = datetime.date(2026, 3, 16)


@pytest.mark.django_db(transaction=True)
def test_cache_metrics_live_counts_equal_the_model_on_the_demo_library(
    redis_client,
):
    seed_library(today=TODAY)
    lab = cache_metrics.LAB

    tables = lab.run(lab.defaults(), live=True)["tables"]

    assert [r[:6] for r in rows(tables, "live_capacity")] == rows(tables, "capacity")
    assert rows(tables, "live_namespaces") == rows(tables, "namespaces")
    assert rows(tables, "live_without_history") == rows(tables, "without_history")
    # The bytes are the real rows' sizes: the demo titles are longer than "Book n".
    [[_, byte_pct, hit_bytes, miss_bytes, _]] = rows(tables, "live_totals")
    assert hit_bytes > 0
    assert byte_pct == round(hit_bytes / (hit_bytes + miss_bytes) * 100, 1)
