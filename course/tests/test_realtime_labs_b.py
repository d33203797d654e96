"""Labs websocket-server, broadcast-and-channel-management and streaming-responses.

Models: the course's printed values with the defaults, and other parameters checked
against a counting reference written here. Live parts: real daphne processes.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import pytest

from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from library.models import Book, Branch, Member
from tests.processes import ROOT, child_env


def run(slug: str, *, live: bool = False, **overrides):
    lab = lab_get(slug)
    return lab.run(lab.validate(overrides), live=live)["tables"]


def rows(tables, name):
    return tables[name]["rows"]


# --- websocket-server -------------------------------------------------------------


def test_websocket_model_prints_the_course_exchange():
    tables = run("websocket-server")
    checks = dict(rows(tables, "handshake"))
    assert checks["sample accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert checks["sample equals the specification"] == "true"
    assert checks["plain request"] == "HTTP/1.1 426 Upgrade Required"
    assert checks["plain request upgrade header"] == "websocket"
    assert checks["status line"] == "HTTP/1.1 101 Switching Protocols"
    assert checks["accept key"] == "correct"
    assert (
        checks["text reply"] == '{"type":"ack","branch":3,"newStock":41} (masked=false)'
    )
    assert checks["ping reply"] == "opcode=0xa is-alive"
    assert checks["close reply"] == "opcode=0x8 code=1000"
    # The server's log in the course: 0x1/38, 0x9/8, 0x8/10, all masked.
    assert rows(tables, "frames") == [
        ["client→server", "0x1", "true", 38],
        ["server→client", "0x1", "false", 39],
        ["client→server", "0x9", "true", 8],
        ["server→client", "0xa", "false", 8],
        ["client→server", "0x8", "true", 10],
        ["server→client", "0x8", "false", 10],
    ]


# --- broadcast-and-channel-management -------------------------------------------------


def test_broadcast_model_equals_the_course_with_two_instances():
    assert rows(run("broadcast-and-channel-management"), "delivery") == [
        ["no relay", 0, 0, 0],
        ["with relay", 1, 1, 2],
    ]


@pytest.mark.parametrize("instances", [3, 4, 6])
def test_broadcast_model_copies_once_per_instance(instances):
    # The relay writes to every listening instance, the sender included.
    tables = run("broadcast-and-channel-management", instances=instances)
    assert rows(tables, "delivery")[1] == ["with relay", 1, 1, instances]


def test_broadcast_lab_rejects_a_single_instance():
    with pytest.raises(ParamError):
        lab_get("broadcast-and-channel-management").resolve({"instances": "1"})


# --- streaming-responses ------------------------------------------------------------


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
    tables = run("streaming-responses")
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
    tables = run("streaming-responses", lines=lines, line_ms=line_ms)
    expected = reference_stream(lines, line_ms)
    for name in ("timing", "framing", "cut"):
        assert rows(tables, name) == expected[name], name


def test_streaming_lab_from_the_command_line():
    result = subprocess.run(
        [sys.executable, "manage.py", "lab", "streaming-responses", "--json"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    document = json.loads(result.stdout)
    assert document["params"] == {"lines": 10, "line_ms": 100}
    assert document["tables"]["timing"]["rows"][1] == ["streaming", 1, 10]


# --- live parts ---------------------------------------------------------------------


@pytest.fixture
def branch(transactional_db, redis_client):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=5)
    Member.objects.create(
        id=1, first_name="A", last_name="B", registered_at=datetime.date(2024, 1, 1)
    )
    return branch


@pytest.mark.processes
def test_websocket_live_part_talks_to_our_daphne(branch):
    tables = run("websocket-server", live=True)
    checks = dict(rows(tables, "live_handshake"))
    assert checks["plain request"] == "HTTP/1.1 426 Upgrade Required"
    assert checks["status line"] == "HTTP/1.1 101 Switching Protocols"
    assert checks["accept key"] == "correct"
    assert checks["first server frame"] == "snapshot (masked=false)"
    assert checks["ping reply"] == "opcode=0xa is-alive"
    assert checks["close reply"] == "opcode=0x8 code=1000"
    frames = rows(tables, "live_frames")
    assert [row[:3] for row in frames] == [
        ["server→client", "0x1", "false"],
        ["client→server", "0x1", "true"],
        ["server→client", "0x1", "false"],
        ["client→server", "0x9", "true"],
        ["server→client", "0xa", "false"],
        ["client→server", "0x8", "true"],
        ["server→client", "0x8", "false"],
    ]
    assert [row[3] for row in frames][1::2] == [21, 8, 10]


@pytest.mark.processes
def test_broadcast_live_part_reaches_the_other_instance_only_over_redis(branch):
    tables = run("broadcast-and-channel-management", live=True)
    assert rows(tables, "live_delivery") == [
        ["memory", 0, 1, 0],
        ["redis", 1, 1, 1],
    ]


@pytest.mark.processes
def test_streaming_live_part_first_byte_and_cut(branch):
    tables = run("streaming-responses", live=True)
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
