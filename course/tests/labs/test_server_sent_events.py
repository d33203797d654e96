"""The server-sent-events lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

from typing import Any

import pytest

from course.labs import server_sent_events
from course.labs.harness.base import ParamError, Tables
from course.tests.labs.lab_results import rows, tables_of
from library.models import Book, Branch


def _script_sse(cut: int) -> list[tuple[int, int]]:
    """The lesson's two connections: (events, last id held) each (independent)."""
    ids = [1, 2, 3, 4, 5, 6]
    first = ids[:cut] if cut else ids
    last = first[-1] if first else 0
    second = [i for i in ids if i > last]
    return [(len(first), last), (len(second), second[-1] if second else last)]


def test_sse_model_prints_the_course_tables():
    tables = tables_of(server_sent_events.LAB)
    assert tables["stream"]["columns"] == ["connection", "events", "last_event_id"]
    assert rows(tables, "stream") == [[1, 3, 3], [2, 3, 6]]
    assert tables["totals"] == {"columns": ["connections", "events"], "rows": [[2, 6]]}


@pytest.mark.parametrize("cut", [0, 1, 2, 4, 5, 6])
def test_sse_model_for_other_cuts(cut):
    tables = tables_of(server_sent_events.LAB, cut=cut)
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


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_sse_live_carries_six_events_over_two_connections(redis_client):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=4)
    tables = tables_of(server_sent_events.LAB, live=True)
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
    tables = tables_of(server_sent_events.LAB, live=True, cut=0)
    stream = rows(tables, "live_stream")
    assert [[r[0], r[1], r[3]] for r in stream] == [[1, 6, 6], [2, 0, 6]]
    assert rows(tables, "live_totals") == [[2, 6, 2, 6]]
