"""Polling Approaches and Server-Sent Events: the course's numbers, other values, live.

The model parts are checked against the course's printed tables and, for other
parameter values, against small independent re-derivations written here from the
lesson's code. The live parts run against a daphne the lab starts on the test
database; their counts are the servers' own and must equal the course's.
"""

from __future__ import annotations

from typing import Any

import pytest

from course.labs import polling_approaches, server_sent_events
from course.labs.harness.base import Lab, ParamError, Tables
from course.labs.registry import lab_get
from jobs.models import JobStatus
from library.models import Book, Branch


def run(lab: Lab, *, live: bool = False, **overrides: Any) -> Tables:
    return lab.run(lab.validate(overrides), live=live)["tables"]


def rows(tables: Tables, name: str) -> list[list[Any]]:
    return tables[name]["rows"]


def test_both_labs_are_registered():
    assert lab_get("polling-approaches") is polling_approaches.LAB
    assert lab_get("server-sent-events") is server_sent_events.LAB


def test_polling_model_prints_the_course_tables():
    tables = run(polling_approaches.LAB)
    assert tables["requests"]["columns"] == ["approach", "requests", "empty_responses"]
    assert rows(tables, "requests") == [["short polling", 6, 5], ["long polling", 2, 1]]
    assert tables["cost"]["columns"] == [
        "approach",
        "window_s",
        "requests",
        "empty_responses",
        "worst_latency",
    ]
    assert rows(tables, "cost") == [
        ["Short polling, 1 s interval", 60, 60, 59, "1 s"],
        ["Short polling, 5 s interval", 60, 12, 11, "5 s"],
        ["Long polling, 30 s hold", 60, 3, 1, "network latency"],
    ]


def _script_long_polling(hold_ms: int) -> tuple[int, int]:
    """The lesson's long-polling half on a millisecond timeline (independent)."""
    version, seen, empty = 0, 0, 0
    # wait?version=0 opens at t=0; the timer fires at hold_ms, /advance at 300 ms.
    if hold_ms <= 300:
        empty += 1  # the timer wins; the response is 204
        version += 1
    else:
        version += 1  # /advance writes the body to the pending response
        seen = version
    # wait?version=1: version > 1 is false, so it is held until its timer.
    seen = 1
    if version <= seen:
        empty += 1
    return 2, empty


@pytest.mark.parametrize("hold_ms", [1, 250, 300, 301, 999, 5000, 30_000])
def test_polling_model_follows_the_hold_for_other_values(hold_ms):
    tables = run(polling_approaches.LAB, hold_ms=hold_ms)
    requests, empty = _script_long_polling(hold_ms)
    assert rows(tables, "requests")[1] == ["long polling", requests, empty]
    assert rows(tables, "requests")[0] == ["short polling", 6, 5]
    # The cost table keeps the lesson's constants (no parameter of its own).
    assert [row[2:4] for row in rows(tables, "cost")] == [[60, 59], [12, 11], [3, 1]]


def test_polling_rejects_holds_it_cannot_run():
    for bad in ("0", "-5", "30001", "soon"):
        with pytest.raises(ParamError):
            polling_approaches.LAB.resolve({"hold_ms": bad})


def _script_sse(cut: int) -> list[tuple[int, int]]:
    """The lesson's two connections: (events, last id held) each (independent)."""
    ids = [1, 2, 3, 4, 5, 6]
    first = ids[:cut] if cut else ids
    last = first[-1] if first else 0
    second = [i for i in ids if i > last]
    return [(len(first), last), (len(second), second[-1] if second else last)]


def test_sse_model_prints_the_course_tables():
    tables = run(server_sent_events.LAB)
    assert tables["stream"]["columns"] == ["connection", "events", "last_event_id"]
    assert rows(tables, "stream") == [[1, 3, 3], [2, 3, 6]]
    assert tables["totals"] == {"columns": ["connections", "events"], "rows": [[2, 6]]}


@pytest.mark.parametrize("cut", [0, 1, 2, 4, 5, 6])
def test_sse_model_for_other_cuts(cut):
    tables = run(server_sent_events.LAB, cut=cut)
    expected = _script_sse(cut)
    assert rows(tables, "stream") == [
        [1, expected[0][0], expected[0][1]],
        [2, expected[1][0], expected[1][1]],
    ]
    assert rows(tables, "totals") == [[2, 6]]


def test_sse_rejects_cuts_it_cannot_run():
    for bad in ("-1", "7", "three"):
        with pytest.raises(ParamError):
            server_sent_events.LAB.resolve({"cut": bad})


# --- live ------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_polling_live_counts_equal_the_course(redis_client):
    tables = run(polling_approaches.LAB, live=True)
    assert rows(tables, "live_requests") == rows(tables, "requests")
    answers = rows(tables, "live_answers")
    assert answers[0][1] == "204 204 204 204 204 200"
    assert [answers[1][1], answers[2][1]] == ["200", "204"]
    # The first wait is answered by the advance (~300 ms), the second runs out.
    assert 250 <= answers[1][2] < 1000
    assert 950 <= answers[2][2] < 3000
    assert not JobStatus.objects.exists()  # the lab's own job is removed


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_sse_live_carries_six_events_over_two_connections(redis_client):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=4)
    tables = run(server_sent_events.LAB, live=True)
    # Ids are log offsets (they outlive a test's rows); the events the client
    # holds after each connection are the course's ids.
    stream = rows(tables, "live_stream")
    assert [[r[0], r[1], r[3]] for r in stream] == [[1, 3, 3], [2, 3, 6]]
    assert stream[1][2] - stream[0][2] == 3
    assert rows(tables, "live_totals") == [[2, 6, 2, 6]]
    assert Book.objects.get(pk=1).on_shelf == 4  # recounts change no shelf
    assert_transcript(tables, stream)


def assert_transcript(tables: Tables, stream: list[list[Any]]) -> None:
    """Both connections' raw lines: retry first, a heartbeat, then each event's
    id, event and data lines ended by a blank line, the ids those the client held."""
    transcript = tables["live_transcript"]
    assert transcript["columns"] == ["connection", "line"]
    for connection, events, last_id, _ in stream:
        lines = [str(line) for c, line in transcript["rows"] if c == connection]
        assert lines[0].startswith("retry: ")
        assert lines[1] == ""
        assert ": heartbeat" in lines
        ids = [int(line[4:]) for line in lines if line.startswith("id: ")]
        assert len(ids) >= events
        assert last_id in ids
        kinds = [line for line in lines if line.startswith("event: ")]
        assert kinds[:events] == ["event: stock_corrected"] * events
        data = [line for line in lines if line.startswith("data: {")]
        assert len(data) >= events
        # Every event block ends with the blank line that dispatches it.
        for index, line in enumerate(lines):
            if line.startswith("data: ") and index + 1 < len(lines):
                assert lines[index + 1] == ""


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_sse_live_without_a_cut(redis_client):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=4)
    tables = run(server_sent_events.LAB, live=True, cut=0)
    stream = rows(tables, "live_stream")
    assert [[r[0], r[1], r[3]] for r in stream] == [[1, 6, 6], [2, 0, 6]]
    assert rows(tables, "live_totals") == [[2, 6, 2, 6]]
