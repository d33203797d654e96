"""The ordering-and-partitioning lab: the course's tables, a reference, the command."""

from itertools import combinations
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs import ordering_and_partitioning as ordering
from course.tests import reference_ordering as ref
from course.tests.lab_results import (
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


# --- the course's printed output, copied from the lesson ----------------------------


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


# --- the partition function ---------------------------------------------------------


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


# --- other parameter values against the reference -----------------------------------

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


# --- the command line ---------------------------------------------------------------


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


# --- the lesson page ----------------------------------------------------------------


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
