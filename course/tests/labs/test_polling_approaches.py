"""The polling-approaches lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest

from course.labs import polling_approaches
from course.labs.harness.base import ParamError
from course.tests.labs.lab_results import rows, tables_of
from jobs.models import JobStatus


def test_polling_model_prints_the_course_tables():
    tables = tables_of(polling_approaches.LAB)
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
    tables = tables_of(polling_approaches.LAB, hold_ms=hold_ms)
    requests, empty = _script_long_polling(hold_ms)
    assert rows(tables, "requests")[1] == ["long polling", requests, empty]
    assert rows(tables, "requests")[0] == ["short polling", 6, 5]
    # The cost table keeps the lesson's constants (no parameter of its own).
    assert [row[2:4] for row in rows(tables, "cost")] == [[60, 59], [12, 11], [3, 1]]


def test_polling_rejects_holds_it_cannot_run():
    for bad in ("0", "-5", "30001", "soon"):
        with pytest.raises(ParamError):
            polling_approaches.LAB.resolve({"hold_ms": bad})


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_polling_live_counts_equal_the_course(redis_client):
    tables = tables_of(polling_approaches.LAB, live=True)
    assert rows(tables, "live_requests") == rows(tables, "requests")
    answers = rows(tables, "live_answers")
    assert answers[0][1] == "204 204 204 204 204 200"
    assert [answers[1][1], answers[2][1]] == ["200", "204"]
    # The first wait is answered by the advance (~300 ms), the second runs out.
    assert 250 <= answers[1][2] < 1000
    assert 950 <= answers[2][2] < 3000
    assert not JobStatus.objects.exists()  # the lab's own job is removed
