"""The long-running-jobs lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.processes import children
from course.labs.harness.base import LabError, ParamError
from course.labs.registry import lab_get
from course.tests.labs.lab_results import (
    assert_refused,
    columns,
    lab_json,
    records,
    run,
)
from jobs.models import JobStatus
from library.models import Branch, Loan

SLUG = "long-running-jobs"


def test_defaults_reproduce_the_course():
    result = run(SLUG)
    assert result["params"] == {"records": 30000, "chunk": 3000, "cancel_at_pct": 40}
    assert columns(result, "cancelled") == ["processed", "total", "status"]
    # "cancelled: user cancelled  processed=12000/30000  total=174000"
    assert records(result, "cancelled") == [
        {"processed": 12000, "total": 174000, "status": "cancelled"}
    ]
    # "done: total=435000  average days=14.50"
    assert records(result, "resumed") == [
        {"processed": 30000, "total": 435000, "average_days": 14.5}
    ]
    assert records(result, "chunking") == [
        {"chunk": 100, "progress_writes": 300, "worst_cancel_delay": 100},
        {"chunk": 500, "progress_writes": 60, "worst_cancel_delay": 500},
        {"chunk": 3000, "progress_writes": 10, "worst_cancel_delay": 3000},
        {"chunk": 10000, "progress_writes": 3, "worst_cancel_delay": 10000},
    ]


def days_sum(m: int) -> int:
    """Sum of i % 30 for i in 1..m: whole cycles of 0+1+...+29, then 1..r."""
    r = m % 30
    return (m // 30) * 435 + r * (r + 1) // 2


def reference(records_: int, chunk: int, cancel_at: int) -> dict[str, list[object]]:
    rounds = math.ceil(records_ / chunk)
    # First round after which the printed percent reaches the threshold.
    k = next(
        (
            k
            for k in range(1, rounds + 1)
            if math.floor(k * chunk / records_ * 100 + 0.5) >= cancel_at
        ),
        None,
    )
    final = rounds * chunk
    if k is None or k == rounds:
        cancelled = [final, days_sum(records_), "done"]
    else:
        cancelled = [k * chunk, days_sum(k * chunk), "cancelled"]
    total = days_sum(records_)
    # Exact average rounded half up to cents; None on an exact half-cent tie, where
    # the double nearest the quotient decides (the lab mirrors toFixed for that).
    cents = Fraction(total * 100, records_)
    tie = cents - math.floor(cents) == Fraction(1, 2)
    average = None if tie else math.floor(cents + Fraction(1, 2)) / 100
    return {"cancelled": cancelled, "resumed": [final, total, average]}


@pytest.mark.parametrize(
    ("records_", "chunk", "cancel_at"),
    [(30000, 3000, 40), (30000, 7000, 90), (100, 7, 0), (100, 7, 100), (31, 10, 50)],
)
def test_matches_the_reference(records_, chunk, cancel_at):
    result = run(SLUG, records=records_, chunk=chunk, cancel_at_pct=cancel_at)
    expected = reference(records_, chunk, cancel_at)
    table = result["tables"]
    assert table["cancelled"]["rows"] == [expected["cancelled"]]
    processed, total, average = table["resumed"]["rows"][0]
    assert [processed, total] == expected["resumed"][:2]
    if expected["resumed"][2] is not None:  # not an exact half-cent tie
        assert average == expected["resumed"][2]
    assert [row[1] for row in table["chunking"]["rows"]] == [
        math.ceil(records_ / size) for size in (100, 500, 3000, 10000)
    ]


@settings(max_examples=60, deadline=None)
@given(
    records_=st.integers(1, 5000),
    chunk=st.integers(1, 6000),
    cancel_at=st.integers(0, 100),
)
def test_matches_the_reference_property(records_, chunk, cancel_at):
    result = run(SLUG, records=records_, chunk=chunk, cancel_at_pct=cancel_at)
    expected = reference(records_, chunk, cancel_at)
    assert result["tables"]["cancelled"]["rows"] == [expected["cancelled"]]
    assert result["tables"]["resumed"]["rows"][0][:2] == expected["resumed"][:2]


def test_average_is_printed_as_to_fixed_2():
    # 4 records: 1+2+3+4 = 10 days, 2.5 on average; 7 records: 28 / 7 = 4.
    assert run(SLUG, records=4, chunk=1)["tables"]["resumed"]["rows"][0] == [4, 10, 2.5]
    assert run(SLUG, records=7, chunk=3)["tables"]["resumed"]["rows"][0] == [9, 28, 4]
    # 31 records: 435 + 1 = 436 days, 436 / 31 = 14.0645...
    assert run(SLUG, records=31, chunk=10)["tables"]["resumed"]["rows"][0][2] == 14.06


def test_lab_command_prints_json():
    body = lab_json(SLUG, "--set", "cancel_at_pct=70")
    assert body["tables"]["cancelled"]["rows"] == [[21000, 304500, "cancelled"]]
    assert body["tables"]["resumed"]["rows"] == [[30000, 435000, 14.5]]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--set", "chunk=0"), "chunk: must be at least 1"),
        (("--set", "cancel_at_pct=101"), "cancel_at_pct: must be at most 100"),
        (("--set", "records=x"), "records: 'x' is not a whole number"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, needle):
    assert_refused(SLUG, *args, needle=needle)


def test_validate_rejects_what_the_command_rejects():
    lab = lab_get(SLUG)
    with pytest.raises(ParamError):
        lab.validate({"chunk": 0})
    assert lab.live is not None


@pytest.mark.django_db
def test_live_refuses_too_few_chunks():
    lab = lab_get(SLUG)
    with pytest.raises(LabError, match="fewer than 3 chunks"):
        lab.run(lab.validate({"records": 100, "chunk": 50}), live=True)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_live_cancel_at_40_and_resume_reach_the_uninterrupted_total(redis_client):
    lab = lab_get(SLUG)
    result = lab.run(lab.validate({"records": 6000, "chunk": 600}), live=True)
    live = result["tables"]["live_cancel_resume"]
    assert live["columns"] == ["run", "processed", "total", "status", "average_days"]
    by_run = {row[0]: row[1:] for row in live["rows"]}
    cancelled, resumed, clean = (
        by_run["cancelled"],
        by_run["resumed"],
        by_run["uninterrupted"],
    )
    # The model's numbers for the same parameters (loan i out i % 30 days).
    model = result["tables"]
    assert model["resumed"]["rows"] == [[6000, 87000, 14.5]]
    assert resumed == [6000, 87000, "done", 14.5]
    assert clean == [6000, 87000, "done", 14.5]
    # Cancelled at a chunk boundary at or after 40 %, before the end.
    assert cancelled[2] == "cancelled"
    assert isinstance(cancelled[0], int)
    assert cancelled[0] % 600 == 0
    assert 2400 <= cancelled[0] < 6000
    assert cancelled[1] == days_sum(cancelled[0])
    # Nothing left behind: the temporary branch, its loans and the lab's rows.
    assert not Branch.objects.filter(name__startswith="Lab run ").exists()
    assert not Loan.objects.exists()
    assert not JobStatus.objects.exists()
    assert children(os.getpid()) == []
