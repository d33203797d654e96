"""The backpressure and load-shedding labs: course tables, a reference, the command,
and their live parts on real rq workers and real daphne."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.base import Tables
from course.labs.registry import lab_get
from course.tests import reference_shedding as ref
from course.tests.lab_results import (
    DETERMINISTIC,
    assert_charts_name_numeric_columns,
    assert_refused,
    columns,
    lab_json,
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


def test_load_shedding_defaults_reproduce_the_course():
    result = run("load-shedding")
    assert columns(result, "latency") == ["mode", "status", "latency_slices", "count"]
    assert rows(result, "latency") == [
        ["unbounded", 200, 3, 2],
        ["unbounded", 200, 6, 2],
        ["unbounded", 200, 9, 2],
        ["unbounded", 200, 12, 2],
        ["unbounded", 200, 15, 2],
        ["controlled", 200, 3, 2],
        ["controlled", 200, 6, 2],
        ["controlled", 503, 0, 6],
    ]


def test_the_references_agree_on_defaults():
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


@settings(max_examples=60, deadline=None)
@given(
    requests=st.integers(1, 60),
    concurrent=st.integers(1, 8),
    queue=st.integers(0, 10),
    job_ms=st.integers(1, 2000),
)
def test_load_shedding_matches_reference_property(requests, concurrent, queue, job_ms):
    result = run(
        "load-shedding",
        requests=requests,
        max_concurrent=concurrent,
        max_queue=queue,
        job_ms=job_ms,
    )
    expected = []
    for mode in ("unbounded", "controlled"):
        expected += ref.shedding(
            mode,
            requests=requests,
            max_concurrent=concurrent,
            max_queue=queue,
            job_ms=job_ms,
        )
    assert rows(result, "latency") == expected


@pytest.mark.parametrize(
    ("args", "table", "first_row"),
    [
        (["backpressure", "--set", "capacity=50"], "policies",
         ["unbounded", 1000, 600, 0, 400, 400, 4000, 0]),
        (["load-shedding", "--set", "max_queue=0"], "latency",
         ["unbounded", 200, 3, 2]),
    ],
)  # fmt: skip
def test_lab_json_from_the_command_line(args, table, first_row):
    assert lab_json(*args)["tables"][table]["rows"][0] == first_row


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["backpressure", "--set", "capacity=0"], "must be at least 1"),
        (["backpressure", "--set", "window_ms=x"], "is not a whole number"),
        (["load-shedding", "--set", "max_concurrent=0"], "must be at least 1"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, needle):
    assert_refused(*args, needle=needle)


@pytest.mark.parametrize("slug", ["backpressure", "load-shedding"])
def test_every_chart_names_columns_the_model_produces(slug):
    assert_charts_name_numeric_columns(slug)


# --- live --------------------------------------------------------------------------


def live_records(tables: Tables, name: str) -> list[dict[str, Any]]:
    found = tables[name]
    return [dict(zip(found["columns"], row, strict=True)) for row in found["rows"]]


@pytest.mark.processes
def test_load_shedding_live_answers_four_and_sheds_six_at_once():
    lab = lab_get("load-shedding")
    tables = lab.run(lab.validate({}), live=True)["tables"]
    found = live_records(tables, "live_latency")
    by_mode: dict[str, dict[int, int]] = {}
    for row in found:
        mode = by_mode.setdefault(str(row["mode"]), {})
        mode[int(row["status"])] = mode.get(int(row["status"]), 0) + int(row["count"])
    assert by_mode == {"unbounded": {200: 10}, "controlled": {200: 4, 503: 6}}
    shed = [r for r in found if r["status"] == 503]
    assert shed == [{"mode": "controlled", "status": 503, "latency_slices": 0,
                     "count": 6}]  # fmt: skip
    # The slowest accepted request of the controlled server beats the unbounded one.
    slowest = {
        mode: max(
            r["latency_slices"]
            for r in found
            if r["mode"] == mode and r["status"] == 200
        )
        for mode in by_mode
    }
    assert slowest["controlled"] < slowest["unbounded"]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_backpressure_live_bounds_the_queue_per_policy(redis_client):
    lab = lab_get("backpressure")
    params = lab.validate({"window_ms": 2500, "capacity": 20})
    tables = lab.run(params, live=True)["tables"]
    found = {r["policy"]: r for r in live_records(tables, "live_policies")}
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
