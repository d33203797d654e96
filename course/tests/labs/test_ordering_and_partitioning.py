"""The ordering-and-partitioning lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import os
from itertools import combinations
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.processes import children
from course.labs import ordering_and_partitioning as ordering
from course.labs.harness import live as harness
from course.labs.harness.base import LabError, Tables
from course.labs.registry import lab_get
from course.tests.labs import reference_ordering_and_partitioning as ref
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
from course.tests.labwork import run_waiting
from library.models import Book, BookLedger, Branch
from messaging.models import DeadLetter

SLUG = "ordering-and-partitioning"


DEFAULTS: dict[str, Any] = {
    "events": 24,
    "seed": 20250720,
    "books": 6,
    "workers": [1, 2, 3, 4],
    "partitions": [1, 2, 3, 4, 6],
    "hot_events": 30,
    "hot_seed": 7,
    "hot_partitions": [1, 2, 4, 8],
}


CONTRACT = {
    "competing": ["workers", "duration", "global_inversions", "in_key_inversions"],
    "partitioned": [
        "partitions",
        "duration",
        "global_inversions",
        "in_key_inversions",
        "partition_loads",
    ],
    "hot_key": ["partitions", "duration", "partition_loads"],
    "head_of_line": ["blocked_events", "average_wait", "alone_average_wait"],
}


def test_defaults_reproduce_the_course():
    result = run(SLUG)
    assert result["params"] == DEFAULTS
    for name, expected in CONTRACT.items():
        assert columns(result, name) == expected
    assert records(result, "workload") == [{"events": 24, "distinct_books": 6}]
    assert records(result, "competing") == [
        {"workers": 1, "duration": 44, "global_inversions": 0, "in_key_inversions": 0},
        {"workers": 2, "duration": 22, "global_inversions": 4, "in_key_inversions": 1},
        {"workers": 3, "duration": 15, "global_inversions": 9, "in_key_inversions": 1},
        {"workers": 4, "duration": 12, "global_inversions": 17,
         "in_key_inversions": 3},
    ]  # fmt: skip
    assert records(result, "partitioned") == [
        {"partitions": 1, "duration": 44, "global_inversions": 0,
         "in_key_inversions": 0, "partition_loads": "44"},
        {"partitions": 2, "duration": 24, "global_inversions": 20,
         "in_key_inversions": 0, "partition_loads": "24 20"},
        {"partitions": 3, "duration": 20, "global_inversions": 24,
         "in_key_inversions": 0, "partition_loads": "20 13 11"},
        {"partitions": 4, "duration": 21, "global_inversions": 25,
         "in_key_inversions": 0, "partition_loads": "3 14 21 6"},
        {"partitions": 6, "duration": 14, "global_inversions": 44,
         "in_key_inversions": 0, "partition_loads": "14 10 7 6 3 4"},
    ]  # fmt: skip
    assert records(result, "hot_workload") == [
        {"events": 30, "total_duration": 59, "hot_book": 3, "hot_events": 18,
         "hot_load": 28},
    ]  # fmt: skip
    assert records(result, "hot_key") == [
        {"partitions": 1, "duration": 59, "partition_loads": "59"},
        {"partitions": 2, "duration": 41, "partition_loads": "18 41"},
        {"partitions": 4, "duration": 28, "partition_loads": "9 13 9 28"},
        {"partitions": 8, "duration": 28, "partition_loads": "0 10 3 28 9 3 6 0"},
    ]
    # printed as 11.0 and 5.0; whole numbers are JSON integers by the contract
    assert records(result, "head_of_line") == [
        {"blocked_events": 5, "average_wait": 11, "alone_average_wait": 5}
    ]


def test_the_reference_agrees_with_the_lab_on_defaults():
    """The reference is only worth trusting if it lands on the course's numbers too."""
    expected = ref.tables(**DEFAULTS)
    result = run(SLUG)
    for name, found in expected.items():
        assert rows(result, name) == found, name


def test_partition_of_is_book_id_modulo_count():
    assert [ordering.partition_of(book, 4) for book in range(1, 9)] == [
        1, 2, 3, 0, 1, 2, 3, 0,
    ]  # fmt: skip
    assert ordering.partition_of(3, 2) == 1  # the hot book's partition at two
    assert {ordering.partition_of(book, 1) for book in range(50)} == {0}


@pytest.mark.parametrize(("key", "partitions"), [(1, 0), (1, -2), (-1, 3)])
def test_partition_of_rejects_what_cannot_route(key, partitions):
    with pytest.raises(ValueError, match=r"partitions must be|non-negative"):
        ordering.partition_of(key, partitions)


@settings(max_examples=50, deadline=None)
@given(events=st.integers(0, 80), seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9))
def test_every_event_runs_on_its_books_partition(events, seed, n):
    run_ = ordering.run_partitioned(ordering.loan_events(events, seed, 6), n)
    assert all(
        done.slot == ordering.partition_of(done.event.book_id, n)
        for done in run_.by_finish
    )
    assert sorted(done.event.order for done in run_.by_finish) == list(range(events))


CASES = [
    {"events": 0},
    {"events": 1, "workers": [1, 5], "partitions": [1, 7]},
    {"events": 200, "books": 1, "workers": [2, 8], "partitions": [1, 3]},
    {"events": 60, "books": 40, "seed": 0, "partitions": [2, 5, 10, 40, 100]},
    {"seed": 2**31 - 1, "workers": [100], "partitions": [100]},
    {"events": 150, "books": 12, "seed": 12345, "workers": [6, 3, 1]},
    {"hot_events": 0, "hot_partitions": [1, 3]},  # nothing behind the hot key
    {"hot_events": 1},
    {"hot_events": 250, "hot_seed": 0, "hot_partitions": [2, 3, 5, 16, 100]},
    {"hot_events": 90, "hot_seed": 2**31 - 1, "hot_partitions": [7]},
]


@pytest.mark.parametrize("overrides", CASES)
def test_matches_reference_for_other_values(overrides):
    params = {**DEFAULTS, **overrides}
    result = run(SLUG, **overrides)
    assert result["params"] == params
    for name, expected in ref.tables(**params).items():
        assert rows(result, name) == expected, name


@settings(max_examples=40, deadline=None)
@given(
    events=st.integers(0, 70),
    seed=st.integers(0, 2**31 - 1),
    books=st.integers(1, 15),
    workers=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    partitions=st.lists(st.integers(1, 20), min_size=1, max_size=4),
    hot_events=st.integers(0, 70),
    hot_seed=st.integers(0, 2**31 - 1),
    hot_partitions=st.lists(st.integers(1, 20), min_size=1, max_size=4),
)
def test_matches_reference_property(**params):
    result = run(SLUG, **params)
    for name, expected in ref.tables(**params).items():
        assert rows(result, name) == expected, name


@settings(max_examples=30, deadline=None)
@given(
    events=st.integers(1, 120),
    seed=st.integers(0, 2**31 - 1),
    books=st.integers(1, 20),
    hot_events=st.integers(1, 120),
    hot_seed=st.integers(0, 2**31 - 1),
    partitions=st.lists(st.integers(1, 30), min_size=1, max_size=5),
)
def test_what_the_lesson_claims_holds_for_any_workload(
    events, seed, books, hot_events, hot_seed, partitions
):
    result = run(
        SLUG,
        events=events,
        seed=seed,
        books=books,
        partitions=partitions,
        workers=[1],
        hot_events=hot_events,
        hot_seed=hot_seed,
        hot_partitions=partitions,
    )
    total = records(result, "competing")[0]["duration"]
    assert records(result, "competing")[0]["global_inversions"] == 0  # one consumer
    for row in records(result, "partitioned"):
        assert row["in_key_inversions"] == 0  # partitioning by book keeps book order
        loads = [int(x) for x in str(row["partition_loads"]).split()]
        assert len(loads) == row["partitions"]
        assert sum(loads) == total
        assert row["duration"] == max(loads)
    hot_load = records(result, "hot_workload")[0]["hot_load"]
    for row in records(result, "hot_key"):
        assert isinstance(row["duration"], int)
        assert isinstance(hot_load, int)
        assert row["duration"] >= hot_load  # the hot key is one partition's floor


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=60))
def test_merge_count_equals_counting_every_pair(values):
    pairs = sum(1 for a, b in combinations(values, 2) if a > b)
    assert ordering.count_inversions(values) == pairs


@pytest.mark.parametrize(
    ("waits", "printed"),
    [
        ([3] + [0] * 19, 0.1),  # 0.15 is a little below the tie as a double
        ([5] + [0] * 19, 0.3),  # 0.25 is an exact tie: toFixed goes away from zero
        ([1, 2], 1.5),
        ([1, 1, 2], 1.3),
        ([], None),  # the course prints "-" / NaN: the contract's null
    ],
)
def test_averages_round_like_to_fixed(waits, printed):
    assert ordering.mean_fixed(waits) == printed


def test_no_events_behind_the_hot_key_give_null_averages():
    result = run(SLUG, hot_events=0)
    assert rows(result, "head_of_line") == [[0, None, None]]
    assert rows(result, "hot_key")[1] == [2, 0, "0 0"]


def test_lab_json_from_the_command_line():
    data = lab_json(SLUG)
    assert data["params"] == DEFAULTS
    assert data["tables"]["partitioned"]["rows"][3] == [4, 21, 25, 0, "3 14 21 6"]
    assert data["tables"]["head_of_line"]["rows"] == [[5, 11, 5]]


def test_command_sets_values_and_lists():
    data = lab_json(SLUG, "--set", "partitions=6,1", "--set", "hot_partitions=8")
    tables = data["tables"]
    assert [row[0] for row in tables["partitioned"]["rows"]] == [6, 1]
    (only,) = tables["hot_key"]["rows"]
    assert only[:2] == [8, 28]
    assert only[2] == "0 10 3 28 9 3 6 0"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "partitions=0"], "must be at least 1"),
        (["--set", "partitions=2,x"], "'x' is not a whole number"),
        (["--set", "workers=0"], "must be at least 1"),
        (["--set", "hot_partitions=101"], "must be at most 100"),
        (["--set", "books=0"], "must be at least 1"),
        (["--set", "events=-1"], "must be at least 0"),
        (["--set", "hot_events=20001"], "must be at most"),
        (["--set", "seed=2147483648"], "must be at most"),
        (["--set", "hot_seed=-1"], "must be at least 0"),
        (["--set", "keys=3"], "has no parameter 'keys'"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, needle):
    assert_refused(SLUG, *args, needle=needle)


def test_every_chart_names_numeric_columns_the_model_produces():
    assert_charts_name_numeric_columns(SLUG)


@pytest.mark.django_db
def test_lesson_page_offers_the_lab_form(client):
    html = lab_form_page(client, SLUG)
    assert 'name="partitions" value="1,2,3,4,6"' in html


@pytest.mark.django_db
def test_lesson_page_runs_the_lab_to_the_commands_result(
    client, redis_client, django_capture_on_commit_callbacks
):

    from jobs.models import JobStatus

    form = {"partitions": "2,4", "hot_events": "40"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/course/{SLUG}/run", form)
    assert response.status_code == 303
    run_waiting()  # what a lab worker does, in this process
    job = JobStatus.objects.get()
    assert job.state == "done", job.error
    assert job.result == lab_json(
        SLUG, "--set", "partitions=2,4", "--set", "hot_events=40"
    )
    page = client.get(f"/course/{SLUG}/?job={job.id}").content.decode()
    assert "<code>head_of_line</code>" in page


def live_tables(**overrides: Any) -> Tables:
    lab = lab_get(SLUG)
    return lab.run(lab.validate(overrides), live=True)["tables"]


def loads(text: str) -> list[int]:
    return [int(n) for n in text.split()]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_competing_workers_invert_a_book_the_partitioned_ledger_never(redis_client):
    # 30 events over 3 books: the model's 4 competing workers invert 9 same-book
    # pairs, so the live run with random delays cannot plausibly invert none.
    tables = live_tables(events=30, books=3, workers=[1, 4])

    one, four = records(tables, "live_competing")
    assert (one["workers"], four["workers"]) == (1, 4)
    assert one["workers_used"] == 1
    assert (one["global_inversions"], one["in_key_inversions"]) == (0, 0)
    assert four["workers_used"] > 1
    assert four["in_key_inversions"] > 0
    assert four["model_in_key_inversions"] == 9
    assert four["duration_s"] < one["duration_s"]

    [part] = records(tables, "live_partitioned")
    assert (part["partitions"], part["workers"], part["events"]) == (4, 4, 30)
    assert part["in_key_inversions"] == 0
    assert part["ledger_out_of_order"] == 0
    # The real router put every event on the partition the model predicts.
    assert part["partition_events"] == part["model_partition_events"]
    assert sum(loads(part["partition_events"])) == 30

    [hot] = records(tables, "live_hot_key")
    assert hot["hot_book"] == ordering.HOT_BOOK
    assert hot["hot_share_pct"] > 50
    assert hot["hot_partition"] == hot["busiest_partition"]
    assert hot["hot_partition"] == hot["hot_book_id"] % 4
    assert hot["partition_events"] == hot["model_partition_events"]
    assert (hot["in_key_inversions"], hot["ledger_out_of_order"]) == (0, 0)

    # One bad change at a partition's head: what queued behind it waited for its
    # attempts; the other partitions did not.
    [blocking] = records(tables, "live_head_of_line")
    assert blocking["blocked_events"] == 6
    assert (blocking["head_attempts"], blocking["head_outcome"]) == (3, "dead letter")
    assert blocking["average_wait_ms"] > blocking["alone_average_wait_ms"]

    # Nothing of the run is left: its books, ledger rows, workers and Redis keys.
    assert not Book.objects.filter(title__startswith="Lab ordering").exists()
    assert not Branch.objects.filter(name__startswith="Lab ordering").exists()
    assert not BookLedger.objects.exists()
    assert not DeadLetter.objects.exists()
    assert children(os.getpid()) == []
    assert not list(redis_client.scan_iter(match="*lab-live-*"))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"events": 401}, "at most 400 events"),
        ({"hot_events": 401}, "at most 400 events"),
        ({"books": 61}, "at most 60 books"),
        ({"workers": [1, 5]}, "at most 4 workers"),
    ],
)
def test_live_limits_are_refused_before_anything_starts(overrides, reason):
    with pytest.raises(LabError, match=reason):
        live_tables(**overrides)
    assert not Book.objects.exists()
    assert children(os.getpid()) == []


def test_live_inversions_count_pairs_of_one_book_apart():
    events = [ordering.Event(order, book, 1) for order, book in enumerate([1, 2, 1])]
    # applied 2, 1, 0: every pair is inverted; only (0, 2) is one book's pair
    assert ordering.live_inversions([2, 1, 0], events) == (3, 1)
    assert ordering.live_inversions([1, 0, 2], events) == (1, 0)


def test_expected_partition_events_route_by_book_modulo():
    events = [ordering.Event(order, book, 1) for order, book in enumerate([1, 5, 4])]
    assert ordering.expected_partition_events(events, 4) == [1, 2, 0, 0]


def test_competing_job_records_its_event_in_finish_order(redis_client):
    key = ordering.applied_key("t" * 10, 2)
    assert key.startswith(harness.PRIVATE_QUEUE_PREFIX)
    ordering.competing_apply(key, 5, 0)
    ordering.competing_apply(key, 3, 0)
    assert redis_client.lrange(key, 0, -1) == [b"5", b"3"]
    assert 0 < redis_client.ttl(key) <= ordering.APPLIED_TTL_S
