"""The websocket-server lab: its model against the course and an independent reference,
its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest

from course.tests.labs.lab_results import rows, tables_of


def test_websocket_model_prints_the_course_exchange():
    tables = tables_of("websocket-server")
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


@pytest.mark.processes
def test_websocket_live_part_talks_to_our_daphne(
    transactional_db, redis_client, library
):
    tables = tables_of("websocket-server", live=True)
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
