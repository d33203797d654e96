"""The load-shedding lab: its model against the course and an independent reference,
its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.registry import lab_get
from course.tests.labs import reference_load_shedding as ref
from course.tests.labs.lab_results import (
    columns,
    records,
    rows,
    run,
)


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


@pytest.mark.processes
def test_load_shedding_live_answers_four_and_sheds_six_at_once():
    lab = lab_get("load-shedding")
    tables = lab.run(lab.validate({}), live=True)["tables"]
    found = records(tables, "live_latency")
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
