"""The worker-processes lab: its model against the course and an independent reference,
its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.queueing import WARMUP_SHARE
from course.labs.registry import lab_get
from course.labs.worker_processes.live import (
    LIVE_JOBS,
    LIVE_LOADS,
    LIVE_MEAN_MS,
    LIVE_VARIABILITY_WORKERS,
)
from course.labs.worker_processes.model import pool_slices
from course.tests.labs.lab_results import (
    DETERMINISTIC,
    assert_refused,
    columns,
    lab_json,
    records,
    run,
)

SLUG = "worker-processes"


def test_defaults_reproduce_the_course():
    result = run(SLUG)
    assert result["params"] == {
        "jobs": 12, "job_ms": 100, "workers": [1, 2, 4], **DETERMINISTIC
    }  # fmt: skip
    assert columns(result, "pool") == ["workers", "jobs", "slices"]
    assert records(result, "pool") == [
        {"workers": 1, "jobs": 12, "slices": 12},
        {"workers": 2, "jobs": 12, "slices": 6},
        {"workers": 4, "jobs": 12, "slices": 3},
    ]
    assert records(result, "supervision") == [
        {
            "completed": "1, 2, 4, 5",
            "dead_letter": "3",
            "workers_spawned": 4,
            "crashing_job_attempts": 2,
        }
    ]


# An independent reference: equal jobs pulled by n workers end after ceil(jobs / n)
# rounds, whatever the job length (the lab simulates the pull with a heap).
@settings(max_examples=200, deadline=None)
@given(
    jobs=st.integers(min_value=1, max_value=500),
    workers=st.integers(min_value=1, max_value=16),
    job_ms=st.integers(min_value=1, max_value=5000),
)
def test_pool_slices_match_whole_rounds(jobs, workers, job_ms):
    assert pool_slices(jobs, workers, job_ms) == math.ceil(jobs / workers)


def test_other_values_are_honoured():
    result = run(SLUG, jobs=7, job_ms=250, workers=[3, 7, 10])
    assert [r["slices"] for r in records(result, "pool")] == [3, 1, 1]


def test_the_command_prints_json_and_refuses_bad_values():
    tables = lab_json(SLUG, "--set", "workers=1,3")["tables"]
    assert tables["pool"]["rows"] == [[1, 12, 12], [3, 12, 4]]
    assert_refused(SLUG, "--set", "workers=0", needle="workers")


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_live_pool_and_supervision_on_real_workers(redis_client):
    lab = lab_get(SLUG)
    params = lab.validate({"jobs": 8, "job_ms": 200, "workers": [1, 4]})
    tables = lab.run(params, live=True)["tables"]
    pool = {
        row[0]: [int(str(cell)) for cell in row] for row in tables["live_pool"]["rows"]
    }
    # Slices are rounded down from measured time. A job sleeps its 200 ms, so no
    # machine can do better than the lesson's count; a loaded one only adds forks
    # and waits, so the upper side is asserted as what load cannot undo: four
    # pulling workers finish in at most half the time of one.
    assert pool[1][2] >= 8
    assert pool[4][2] >= 2
    assert pool[4][3] * 2 <= pool[1][3]
    assert pool[4][4] == 4  # every worker process took jobs (pull-based)
    assert tables["live_supervision"]["rows"] == [["1, 2, 4, 5", "3", 2, 2]]
    # A random stream on two real workers at three loads: every job's wait measured
    # (the warm-up's excepted), and nothing here depends on how fast the machine is.
    live = tables["live_variability"]
    found = [dict(zip(live["columns"], row, strict=True)) for row in live["rows"]]
    assert [r["utilisation_pct"] for r in found] == list(LIVE_LOADS)
    for row in found:
        assert row["workers"] == LIVE_VARIABILITY_WORKERS
        assert row["jobs"] == LIVE_JOBS - math.ceil(LIVE_JOBS * WARMUP_SHARE)
        # A job holds its worker at least as long as it sleeps.
        assert float(str(row["service_ms"])) >= LIVE_MEAN_MS
        p50, p99 = float(str(row["p50_wait_ms"])), float(str(row["p99_wait_ms"]))
        assert 0 <= p50 <= p99
        assert float(str(row["measured_l"])) >= 0
        assert float(str(row["erlang_c_wait_ms"])) > 0
