"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import json
from dataclasses import dataclass

from course.instruments.websocket_client import (
    PING,
    PONG,
    TEXT,
    Frame,
    FrameRecord,
    Handshake,
    RawWebSocket,
    plain_get,
)
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live_http import daphnes, host_header, request_headers
from course.labs.websocket_server.model import (
    FRAME_COLUMNS,
    HANDSHAKE_COLUMNS,
    frame_rows,
)
from course.labs.websocket_server.params import WebsocketServerParams
from library.models import Branch


@dataclass(frozen=True)
class Measurement:
    """A plain GET of the socket's path, then one real WebSocket session."""

    plain_status: str  # the status line daphne answered
    plain_upgrade: str
    plain_body: str
    handshake: Handshake
    first: Frame  # the server's first frame: the snapshot
    pong: Frame
    closed: Frame
    frames: list[FrameRecord]  # every frame either way, in order


def measure(params: WebsocketServerParams, progress: Progress) -> Measurement:
    """Ask daphne's socket route as plain HTTP, then talk WebSocket to it by hand."""
    branch = Branch.objects.order_by("id").values_list("id", flat=True).first()
    if branch is None:
        raise LabError("live: the database has no branch; load the demo data first")
    path = f"/ws/branches/{branch}/stock/"
    with daphnes(progress, ["on"]) as (server,):
        progress(0.6, f"live: raw client on daphne port {server.port}")
        host = host_header(server.port)
        status, headers, body = plain_get(
            "127.0.0.1", server.port, path, headers=request_headers(server)
        )
        try:
            ws = RawWebSocket.connect(
                "127.0.0.1",
                server.port,
                path,
                headers={"Host": host, "Origin": f"http://{host}"},
            )
        except OSError as error:
            raise LabError(f"live: the WebSocket upgrade failed: {error}") from None
        snapshot = ws.receive()
        ws.send(TEXT, b'{"action":"snapshot"}')
        ws.receive()
        ws.send(PING, b"is-alive")
        pong = ws.receive_until(PONG)
        closed = ws.close(1000, "job done")
    return Measurement(
        plain_status=status,
        plain_upgrade=headers.get("upgrade", ""),
        plain_body=body.decode(errors="replace").strip(),
        handshake=ws.handshake,
        first=snapshot,
        pong=pong,
        closed=closed,
        frames=list(ws.log),
    )


def tables(params: WebsocketServerParams, measured: Measurement) -> Tables:
    """The handshake as the lesson reads it, and every frame either way."""
    handshake, first = measured.handshake, measured.first
    pong, closed = measured.pong, measured.closed
    kind = json.loads(first.payload).get("type")
    rows: list[list[Cell]] = [
        ["plain request", measured.plain_status],
        ["plain request upgrade header", measured.plain_upgrade],
        ["plain request body", measured.plain_body],
        ["status line", handshake.status_line],
        ["accept key", "correct" if handshake.accept_correct else "incorrect"],
        ["key sent (random)", handshake.key],
        ["first server frame", f"{kind} (masked={str(first.masked).lower()})"],
        ["ping reply", f"opcode=0x{pong.opcode:x} {pong.payload.decode()}"],
        ["close reply", f"opcode=0x{closed.opcode:x} code={closed.close_code}"],
    ]
    return {
        "live_handshake": table(HANDSHAKE_COLUMNS, rows),
        "live_frames": table(FRAME_COLUMNS, frame_rows(measured.frames)),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
