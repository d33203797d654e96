"""The streaming-responses lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from config.processes import ROOT, child_environment
from course.tests.labs.lab_results import rows, tables_of


def reference_stream(lines: int, line_ms: int) -> dict[str, list[list[object]]]:
    """Walk chunked.mjs's loop on a clock; return the three tables' rows."""
    clock, arrivals, body = 0, [], ""
    for i in range(1, lines + 1):
        clock += line_ms
        line = f"{str(i).zfill(2)};branch-{1 + (i % 3)};loan={40 + i * 3}\n"
        arrivals.append(clock)
        body += line
    end = clock
    first = arrivals[0] if arrivals else end
    cut_lines = body.splitlines()[:3]
    if lines >= 4:
        cut_lines.append("#error;report cut off midway;line=3")
    return {
        "timing": [
            ["full", end // 100, end // 100],
            ["streaming", first // 100, end // 100],
        ],
        "framing": [
            ["full", f"content-length: {len(body)}"],
            ["streaming", "Transfer-Encoding: chunked"],
        ],
        "cut": [[200, cut_lines[-1] if cut_lines else ""]],
    }


def test_streaming_model_equals_the_course():
    tables = tables_of("streaming-responses")
    assert rows(tables, "timing") == [["full", 10, 10], ["streaming", 1, 10]]
    assert rows(tables, "framing") == [
        ["full", "content-length: 200"],
        ["streaming", "Transfer-Encoding: chunked"],
    ]
    assert rows(tables, "cut") == [[200, "#error;report cut off midway;line=3"]]


@pytest.mark.parametrize(
    ("lines", "line_ms"), [(10, 100), (3, 250), (0, 100), (25, 40), (120, 7), (4, 0)]
)
def test_streaming_model_follows_the_reference(lines, line_ms):
    tables = tables_of("streaming-responses", lines=lines, line_ms=line_ms)
    expected = reference_stream(lines, line_ms)
    for name in ("timing", "framing", "cut"):
        assert rows(tables, name) == expected[name], name


def test_streaming_lab_from_the_command_line():
    result = subprocess.run(
        [sys.executable, "manage.py", "lab", "streaming-responses", "--json"],
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    document = json.loads(result.stdout)
    assert document["params"] == {"lines": 10, "line_ms": 100}
    assert document["tables"]["timing"]["rows"][1] == ["streaming", 1, 10]


@pytest.mark.processes
def test_streaming_live_part_first_byte_and_cut(
    transactional_db, redis_client, library
):
    tables = tables_of("streaming-responses", live=True)
    (full, streaming) = rows(tables, "live_timing")
    assert full[0] == "full"
    # Tenths of a second, rounded down. Each of the ten lines sleeps 100 ms, so the
    # lower bounds are exact on any machine; load only adds time, so the rest is
    # asserted as orderings it cannot reverse: the buffered body's first byte waits
    # for all ten lines, the stream's first byte comes before its own last line
    # and before the buffered body's first.
    assert full[1] >= 10
    assert streaming[0] == "streaming"
    assert streaming[1] >= 1
    assert streaming[2] >= 10
    assert streaming[1] < streaming[2]
    assert streaming[1] < full[1]
    assert rows(tables, "live_framing") == [
        ["full", "content-length: 220"],  # the lesson's 200 bytes and our marker
        ["streaming", "Transfer-Encoding: chunked"],
    ]
    assert rows(tables, "live_cut") == [
        [200, "# error: report cut off midway; line=3; after 3 rows"]
    ]
