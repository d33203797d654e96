"""Publish-subscribe and streams-vs-queues: printed tables, a reference, the command."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.registry import lab_get
from course.tests import reference_messaging_b as ref
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
from jobs.models import JobStatus

PUBSUB = "publish-subscribe"
STREAMS = "streams-vs-queues"
PUBSUB_DEFAULTS = {"rounds": 6, "per_round": 4, "budget": 6, "slow_duration": 3}


# --- the course's printed output, copied from the lessons ---------------------------


def test_publish_subscribe_defaults_reproduce_the_course():
    result = run(PUBSUB)
    assert result["params"] == PUBSUB_DEFAULTS
    assert columns(result, "fan_out") == [
        "subscribers",
        "publish_calls",
        "copies",
        "delivered",
    ]
    assert records(result, "fan_out") == [
        {"subscribers": 1, "publish_calls": 4, "copies": 4, "delivered": 4},
        {"subscribers": 2, "publish_calls": 4, "copies": 8, "delivered": 8},
        {"subscribers": 3, "publish_calls": 4, "copies": 12, "delivered": 12},
        {"subscribers": 4, "publish_calls": 4, "copies": 16, "delivered": 16},
    ]
    assert columns(result, "slow_subscriber") == [
        "round",
        "notification",
        "stock_summary",
        "report",
    ]
    assert records(result, "slow_subscriber") == [
        {"round": 1, "notification": "4/0", "stock_summary": "4/0", "report": "2/2"},
        {"round": 2, "notification": "8/0", "stock_summary": "8/0", "report": "4/4"},
        {"round": 3, "notification": "12/0", "stock_summary": "12/0",
         "report": "6/6"},
        {"round": 4, "notification": "16/0", "stock_summary": "16/0",
         "report": "8/8"},
        {"round": 5, "notification": "20/0", "stock_summary": "20/0",
         "report": "10/10"},
        {"round": 6, "notification": "24/0", "stock_summary": "24/0",
         "report": "12/12"},
    ]  # fmt: skip
    assert columns(result, "filter") == [
        "filter",
        "published",
        "copies",
        "notification",
        "stock_summary",
        "report",
    ]
    assert rows(result, "filter") == [
        ["off", 8, 24, 8, 8, 8],
        ["on", 8, 14, 5, 6, 3],
    ]
    assert records(result, "late_subscriber") == [{"published": 5, "missed_by_late": 3}]
    # the two intermediate lines of the late-subscriber run
    assert records(result, "late_subscriber_steps") == [
        {"stage": "before search-index subscribes", "published": 3,
         "notification": 3, "stock_summary": 3, "search_index": None},
        {"stage": "after search-index subscribes", "published": 5,
         "notification": 5, "stock_summary": 5, "search_index": 2},
    ]  # fmt: skip
    assert [r[1:] for r in rows(result, "backlog")] == [
        [0, 0, n] for n in range(2, 13, 2)
    ]


def test_streams_vs_queues_defaults_reproduce_the_course():
    result = run(STREAMS)
    assert result["params"] == {"keep": 4}
    assert records(result, "storage") == [
        {"model": "single log", "files": 1, "bytes": 352},
        {"model": "subscription copy", "files": 3, "bytes": 1056},
    ]
    assert records(result, "offsets") == [
        {"consumer": "notification", "offset": 6},
        {"consumer": "stock-summary", "offset": 4},
        {"consumer": "report", "offset": 1},
    ]
    assert records(result, "replay") == [
        {"model": "queue", "written": 6, "first_consumer": 6, "later_consumer": 0},
        {"model": "stream", "written": 6, "first_consumer": 6, "later_consumer": 6},
    ]
    assert records(result, "retention") == [
        {"dropped": 6, "earliest_offset": 6, "lost_by_report": 4}
    ]
    # the lesson's other printed lines
    assert records(result, "lag") == [{"log_records": 6, "report_behind": 5}]
    assert rows(result, "log_head") == [
        [0, '{"type":"loan_issued","loanId":1,"bookId":1,"memberId":1}'],
        [1, '{"type":"loan_issued","loanId":2,"bookId":2,"memberId":2}'],
        [2, '{"type":"return_received","loanId":1,"bookId":1,"memberId":1}'],
    ]
    assert rows(result, "replay_state") == [["queue", 0], ["stream", 6]]
    assert records(result, "rewind") == [
        {"rewound_to": 3, "reread": 3, "first_loan": 4}
    ]
    assert rows(result, "retention_log") == [
        ["before trim", 10, 0],
        ["after trim", 4, 6],
    ]
    assert rows(result, "retention_reads") == [
        ["before trim", "report", 2, 8, "readable"],
        ["after trim", "notification", 10, 0, "readable"],
        ["after trim", "report", 2, None, "trimmed"],
    ]


def test_the_reference_agrees_with_the_labs_on_defaults():
    """The reference is only worth trusting if it lands on the course's numbers too."""
    result = run(PUBSUB)
    assert rows(result, "fan_out") == ref.fan_out()
    shares, pending = ref.slow_subscriber(**PUBSUB_DEFAULTS)
    assert rows(result, "slow_subscriber") == shares
    assert rows(result, "backlog") == pending
    assert rows(result, "filter") == ref.filter_table()
    assert rows(result, "late_subscriber") == ref.late_subscriber()
    result = run(STREAMS)
    assert rows(result, "storage") == ref.storage()
    assert rows(result, "offsets") == ref.offsets()
    assert rows(result, "replay") == ref.replay()
    assert rows(result, "retention") == ref.retention(4)
    assert rows(result, "retention_reads") == ref.retention_reads(4)


# --- other parameter values against the reference -----------------------------------


def assert_pubsub_matches_reference(params):
    result = run(PUBSUB, **params)
    shares, pending = ref.slow_subscriber(
        params["rounds"], params["per_round"], params["budget"], params["slow_duration"]
    )
    assert rows(result, "slow_subscriber") == shares
    assert rows(result, "backlog") == pending
    # the tables without a parameter of their own stay at the course's constants
    assert rows(result, "fan_out") == ref.fan_out()
    assert rows(result, "filter") == ref.filter_table()
    assert rows(result, "late_subscriber") == ref.late_subscriber()


@pytest.mark.parametrize(
    "params",
    [
        {"rounds": 1, "per_round": 0, "budget": 0, "slow_duration": 0},
        {"rounds": 3, "per_round": 5, "budget": 0, "slow_duration": 3},  # nothing moves
        {"rounds": 4, "per_round": 4, "budget": 6, "slow_duration": 0},  # report free
        {"rounds": 6, "per_round": 4, "budget": 12, "slow_duration": 3},  # keeps up
        {"rounds": 6, "per_round": 4, "budget": 6, "slow_duration": 7},  # never starts
        {"rounds": 10, "per_round": 9, "budget": 6, "slow_duration": 1},  # all behind
        {"rounds": 8, "per_round": 3, "budget": 5, "slow_duration": 2},
        {"rounds": 500, "per_round": 500, "budget": 1_000_000, "slow_duration": 1},
        {"rounds": 200, "per_round": 7, "budget": 999_999, "slow_duration": 1_000_000},
    ],
)
def test_publish_subscribe_matches_reference(params):
    assert_pubsub_matches_reference(params)


@settings(max_examples=40, deadline=None)
@given(
    rounds=st.integers(1, 40),
    per_round=st.integers(0, 30),
    budget=st.integers(0, 60),
    slow_duration=st.integers(0, 15),
)
def test_publish_subscribe_matches_reference_property(**params):
    assert_pubsub_matches_reference(params)


@settings(max_examples=25, deadline=None)
@given(
    rounds=st.integers(1, 30),
    per_round=st.integers(0, 20),
    budget=st.integers(0, 40),
    slow_duration=st.integers(0, 10),
)
def test_every_published_copy_is_processed_or_pending(**params):
    result = run(PUBSUB, **params)
    for row in rows(result, "slow_subscriber"):
        published = row[0] * params["per_round"]
        for cell in row[1:]:
            processed, pending = (int(n) for n in str(cell).split("/"))
            assert processed + pending == published


@pytest.mark.parametrize("keep", [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 1_000_000])
def test_streams_vs_queues_matches_reference(keep):
    result = run(STREAMS, keep=keep)
    assert rows(result, "retention") == ref.retention(keep)
    assert rows(result, "retention_reads") == ref.retention_reads(keep)
    # only retention depends on keep
    assert rows(result, "storage") == ref.storage()
    assert rows(result, "offsets") == ref.offsets()
    assert rows(result, "replay") == ref.replay()


@settings(max_examples=25, deadline=None)
@given(keep=st.integers(0, 1_000_000))
def test_streams_retention_matches_reference_property(keep):
    result = run(STREAMS, keep=keep)
    assert rows(result, "retention") == ref.retention(keep)
    assert rows(result, "retention_reads") == ref.retention_reads(keep)


def test_retention_follows_the_course_subtraction_when_report_is_not_behind():
    # keep 9 drops one record: report at offset 2 is still readable, and the course's
    # "lost" subtraction is the (negative) margin left before the trim reaches it
    assert rows(run(STREAMS, keep=9), "retention") == [[1, 1, -1]]
    assert rows(run(STREAMS, keep=9), "retention_reads")[2] == [
        "after trim",
        "report",
        2,
        8,
        "readable",
    ]


# --- the command line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("slug", "table", "first_row"),
    [
        (PUBSUB, "slow_subscriber", [1, "4/0", "4/0", "2/2"]),
        (PUBSUB, "late_subscriber", [5, 3]),
        (STREAMS, "storage", ["single log", 1, 352]),
        (STREAMS, "retention", [6, 6, 4]),
    ],
)
def test_lab_json_from_the_command_line(slug, table, first_row):
    assert lab_json(slug)["tables"][table]["rows"][0] == first_row


def test_command_sets_values():
    data = lab_json(PUBSUB, "--set", "rounds=2", "--set", "slow_duration=1")
    assert data["params"] == {**PUBSUB_DEFAULTS, "rounds": 2, "slow_duration": 1}
    assert data["tables"]["slow_subscriber"]["rows"] == [
        [1, "4/0", "4/0", "4/0"],
        [2, "8/0", "8/0", "8/0"],
    ]
    data = lab_json(STREAMS, "--set", "keep=0")
    assert data["tables"]["retention"]["rows"] == [[10, 10, 8]]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([PUBSUB, "--set", "rounds=0"], "must be at least 1"),
        ([PUBSUB, "--set", "rounds=501"], "must be at most 500"),
        ([PUBSUB, "--set", "per_round=-1"], "must be at least 0"),
        ([PUBSUB, "--set", "budget=six"], "'six' is not a whole number"),
        ([PUBSUB, "--set", "slow_duration=1.5"], "not a whole number"),
        ([PUBSUB, "--set", "subscribers=3"], "has no parameter 'subscribers'"),
        ([STREAMS, "--set", "keep=-1"], "must be at least 0"),
        ([STREAMS, "--set", "keep="], "is not a whole number"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, needle):
    assert_refused(*args, needle=needle)


# --- the lesson pages ---------------------------------------------------------------


@pytest.mark.parametrize("slug", [PUBSUB, STREAMS])
def test_every_chart_names_columns_the_model_produces(slug):
    assert_charts_name_numeric_columns(slug)


@pytest.mark.parametrize("slug", [PUBSUB, STREAMS])
def test_labs_have_a_live_part(slug):
    # Its runs on real processes: course/tests/test_live_messaging_labs_b.py.
    assert lab_get(slug).live is not None


@pytest.mark.django_db
@pytest.mark.parametrize("slug", [PUBSUB, STREAMS])
def test_lesson_page_offers_the_lab_form(client, slug):
    assert "not built yet" not in lab_form_page(client, slug)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("slug", "form", "table", "cell"),
    [
        (PUBSUB, {"rounds": "3", "slow_duration": "2"}, "slow_subscriber", "9/3"),
        (STREAMS, {"keep": "2"}, "retention", "8"),
    ],
)
def test_a_run_from_the_page_shows_its_tables(
    client, redis_client, django_capture_on_commit_callbacks, slug, form, table, cell
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/course/{slug}/run", form)
    assert response.status_code == 303
    run_waiting()  # what a lab worker does, in this process
    job = JobStatus.objects.get()
    assert job.state == "done", job.error
    sets = [arg for name, value in form.items() for arg in ("--set", f"{name}={value}")]
    assert job.result == lab_json(slug, *sets)
    html = client.get(response["Location"]).content.decode()
    for name in job.result["tables"]:
        assert f"<code>{name}</code>" in html
    assert f"<td>{cell}</td>" in html
