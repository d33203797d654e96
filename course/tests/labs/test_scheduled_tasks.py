"""The scheduled-tasks lab: its model against the course and an independent reference,
its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from course.labs.scheduled_tasks.model import next_runs_table, parse_start
from course.tests.labs import reference_scheduled_tasks as ref
from course.tests.labs.lab_results import (
    assert_charts_name_numeric_columns,
    assert_refused,
    columns,
    lab_form_page,
    lab_json,
    records,
    rows,
    run,
)

SLUG = "scheduled-tasks"


START_MS = 1_769_903_220_000  # 2026-01-31T23:47:00Z


def test_defaults_reproduce_the_course():
    result = run(SLUG)
    assert result["params"] == {"start": "2026-01-31T23:47:00Z", "runs": 3}
    assert columns(result, "next_runs") == ["task", "run_1", "run_2", "run_3"]
    runs = {
        r["task"]: (r["run_1"], r["run_2"], r["run_3"])
        for r in records(result, "next_runs")
    }
    assert list(runs) == [
        "overdue_notification",
        "inventory_summary",
        "monthly_report",
        "end_of_month",
        "end_of_month_clamp",
        "end_of_month_skip",
    ]
    assert runs["overdue_notification"][0] == "2026-02-01 06:00"
    assert runs["overdue_notification"][1] == "2026-02-02 06:00"
    assert runs["overdue_notification"][2] == "2026-02-03 06:00"
    assert runs["inventory_summary"][0] == "2026-02-01 00:00"
    assert runs["inventory_summary"][1] == "2026-02-01 00:15"
    assert runs["inventory_summary"][2] == "2026-02-01 00:30"
    assert runs["monthly_report"][0] == "2026-02-01 02:30"
    assert runs["monthly_report"][1] == "2026-03-01 02:30"
    assert runs["monthly_report"][2] == "2026-04-01 02:30"
    assert runs["end_of_month"][0] == "2026-03-03 02:30"
    assert runs["end_of_month"][1] == "2026-03-31 02:30"
    assert runs["end_of_month"][2] == "2026-05-01 02:30"
    # Not printed by the course: the two policies it names for the 31st.
    assert runs["end_of_month_clamp"][0] == "2026-02-28 02:30"
    assert runs["end_of_month_clamp"][1] == "2026-03-31 02:30"
    assert runs["end_of_month_clamp"][2] == "2026-04-30 02:30"
    assert runs["end_of_month_skip"][0] == "2026-03-31 02:30"
    assert runs["end_of_month_skip"][1] == "2026-05-31 02:30"
    assert runs["end_of_month_skip"][2] == "2026-07-31 02:30"  # fmt: skip
    assert records(result, "overlap") == [
        {"mode": "unlocked", "runs": 2, "skipped": 0, "concurrent_peak": 2},
        {"mode": "locked", "runs": 1, "skipped": 1, "concurrent_peak": 1},
    ]


def test_the_reference_agrees_with_the_lab_on_defaults():
    result = run(SLUG)
    assert rows(result, "next_runs") == ref.next_runs_rows(START_MS, 3)
    assert rows(result, "overlap") == ref.overlap_rows()
    assert ref.stamp(START_MS) == "2026-01-31 23:47"


@pytest.mark.parametrize(
    ("start", "runs"),
    [
        ("2028-02-28T02:30:00Z", 4),  # leap February: the 29th exists
        ("2026-12-31T23:59:59Z", 3),  # across the year end
        ("2027-04-30T02:30:00", 5),  # no offset: UTC; April has no 31st
        ("2026-02-01T08:59:00+03:00", 2),  # 05:59 UTC
        ("2099-11-30T12:00:00Z", 6),  # 2100 is not a leap year
    ],
)
def test_other_starts_match_the_reference(start, runs):
    result = run(SLUG, start=start, runs=runs)
    instant = parse_start(start)
    start_ms = int(instant.timestamp() * 1000)
    assert rows(result, "next_runs") == ref.next_runs_rows(start_ms, runs)
    assert columns(result, "next_runs") == [
        "task",
        *(f"run_{n}" for n in range(1, runs + 1)),
    ]


def test_offsets_are_the_same_instant():
    east = run(SLUG, start="2026-02-01T08:59:00+03:00", runs=1)
    utc = run(SLUG, start="2026-02-01T05:59:00Z", runs=1)
    assert rows(east, "next_runs") == rows(utc, "next_runs")
    assert rows(utc, "next_runs")[0] == ["overdue_notification", "2026-02-01 06:00"]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(
        min_value=ref.days_from_civil(1995, 1, 1) * ref.DAY_MS,
        max_value=ref.days_from_civil(2105, 1, 1) * ref.DAY_MS,
    ),
    st.integers(1, 12),
)
def test_next_runs_match_the_reference_property(start_ms, runs):
    start = datetime.datetime.fromtimestamp(start_ms / 1000, tz=datetime.UTC)
    found = next_runs_table(start, runs)
    assert found["rows"] == ref.next_runs_rows(start_ms, runs)


def test_lab_json_from_the_command_line():
    data = lab_json(SLUG, "--set", "runs=2", "--set", "start=2026-01-31T23:47:00Z")
    assert data["params"] == {"start": "2026-01-31T23:47:00Z", "runs": 2}
    end_of_month = data["tables"]["next_runs"]["rows"][3]
    assert end_of_month[0] == "end_of_month"
    assert end_of_month[1] == "2026-03-03 02:30"
    assert end_of_month[2] == "2026-03-31 02:30"
    assert data["tables"]["overlap"]["rows"] == [
        ["unlocked", 2, 0, 2],
        ["locked", 1, 1, 1],
    ]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "runs=0"], "must be at least 1"),
        (["--set", "runs=25"], "must be at most 24"),
        (["--set", "start=yesterday"], "is not an ISO 8601 instant"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, needle):
    assert_refused(SLUG, *args, needle=needle)


def test_validate_rejects_a_bad_start():
    with pytest.raises(ParamError, match="start"):
        lab_get(SLUG).validate({"start": "2026-13-01T00:00:00Z"})


def test_the_chart_names_columns_the_model_produces():
    assert_charts_name_numeric_columns(SLUG, numeric=(int,))


@pytest.mark.django_db
def test_lesson_page_offers_the_lab_form(client):
    lab_form_page(client, SLUG)


@pytest.mark.processes
def test_live_part_reaches_the_course_counts_on_real_processes(redis_client):
    lab = lab_get(SLUG)
    result = lab.run(lab.defaults(), live=True)
    assert records(result, "live_overlap") == [
        {"mode": "unlocked", "runs": 2, "skipped": 0, "concurrent_peak": 2},
        {"mode": "locked", "runs": 1, "skipped": 1, "concurrent_peak": 1},
    ]
    # The run's keys are gone; nothing of it is left in Redis.
    assert redis_client.keys("lab-sched:*") == []
    assert redis_client.keys("lease:lab:*") == []
