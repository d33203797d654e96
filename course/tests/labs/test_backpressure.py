"""The backpressure lab: its model against the course and an independent reference, its
live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.registry import lab_get
from course.tests.labs import reference_backpressure as ref
from course.tests.labs.lab_results import (
    DETERMINISTIC,
    columns,
    records,
    rows,
    run,
)


def test_backpressure_defaults_reproduce_the_course():
    result = run("backpressure")
    assert result["params"] == {
        "window_ms": 10000, "produce_per_s": 100, "consume_per_s": 60, "capacity": 100,
        **DETERMINISTIC,
    }  # fmt: skip
    assert columns(result, "policies") == [
        "policy", "produced", "delivered", "dropped", "remaining", "peak",
        "longest_wait_ms", "producer_wait_ms",
    ]  # fmt: skip
    assert rows(result, "policies") == [
        ["unbounded", 1000, 600, 0, 400, 400, 4000, 0],
        ["tail-drop", 1000, 600, 301, 99, 100, 1664, 0],
        ["head-drop", 1000, 600, 301, 99, 100, 997, 0],
        ["block", 699, 600, 0, 99, 100, 1666, 7490],
    ]
    assert records(result, "producer_signal") == [
        {"mode": "listening", "full_signals": 4, "buffer_peak_bytes": 16384},
        {"mode": "ignoring", "full_signals": 49, "buffer_peak_bytes": 65536},
    ]


def test_backpressure_reference_agrees_on_defaults():
    result = run("backpressure")
    expected = [
        ref.backpressure(p, window=10000, produce=100, consume=60, capacity=100)
        for p in ("unbounded", "tail-drop", "head-drop", "block")
    ]
    assert rows(result, "policies") == expected
    assert [r[1:] for r in rows(result, "producer_signal")] == [
        ref.stream_signals(listening=True),
        ref.stream_signals(listening=False),
    ]


@settings(max_examples=40, deadline=None)
@given(
    window=st.integers(100, 4000),
    produce=st.integers(1, 400),
    consume=st.integers(1, 400),
    capacity=st.integers(1, 300),
)
def test_backpressure_matches_reference_property(window, produce, consume, capacity):
    result = run(
        "backpressure",
        window_ms=window,
        produce_per_s=produce,
        consume_per_s=consume,
        capacity=capacity,
    )
    assert rows(result, "policies") == [
        ref.backpressure(
            p, window=window, produce=produce, consume=consume, capacity=capacity
        )
        for p in ("unbounded", "tail-drop", "head-drop", "block")
    ]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_backpressure_live_bounds_the_queue_per_policy(redis_client):
    lab = lab_get("backpressure")
    params = lab.validate({"window_ms": 2500, "capacity": 20})
    tables = lab.run(params, live=True)["tables"]
    found = {r["policy"]: r for r in records(tables, "live_policies")}
    assert list(found) == ["unbounded", "tail-drop", "head-drop", "block"]
    for policy, row in found.items():
        # Every produced job is accounted for (one may be in a work-horse's fork).
        settled = int(row["delivered"]) + int(row["dropped"]) + int(row["remaining"])
        assert int(row["produced"]) - settled in (0, 1, 2), policy
        if policy != "unbounded":
            assert int(row["peak"]) <= 20
    assert int(found["unbounded"]["peak"]) > 20
    assert found["unbounded"]["dropped"] == found["block"]["dropped"] == 0
    assert int(found["tail-drop"]["dropped"]) > 0
    assert int(found["head-drop"]["dropped"]) > 0
    assert int(found["block"]["producer_wait_ms"]) > 0
    assert int(found["block"]["produced"]) < int(found["tail-drop"]["produced"])
    # Head drop keeps younger jobs than tail drop: on average, their wait is shorter
    # (the longest wait is one job's, which a slow fork on a loaded machine moves).
    assert float(found["head-drop"]["average_wait_ms"]) < float(
        found["tail-drop"]["average_wait_ms"]
    )
