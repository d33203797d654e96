"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import json

from course.instruments.websocket_client import (
    PING,
    PONG,
    TEXT,
    RawWebSocket,
    plain_get,
)
from course.labs.harness.base import (
    Cell,
    LabError,
    Params,
    Progress,
    Tables,
    table,
)
from course.labs.harness.live_http import daphnes, host_header, request_headers
from course.labs.websocket_server.model import (
    FRAME_COLUMNS,
    HANDSHAKE_COLUMNS,
    frame_rows,
)
from library.models import Branch


def live(params: Params, progress: Progress) -> Tables:

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
    kind = json.loads(snapshot.payload).get("type")
    rows: list[list[Cell]] = [
        ["plain request", status],
        ["plain request upgrade header", headers.get("upgrade", "")],
        ["plain request body", body.decode(errors="replace").strip()],
        ["status line", ws.handshake.status_line],
        ["accept key", "correct" if ws.handshake.accept_correct else "incorrect"],
        ["key sent (random)", ws.handshake.key],
        ["first server frame", f"{kind} (masked={str(snapshot.masked).lower()})"],
        ["ping reply", f"opcode=0x{pong.opcode:x} {pong.payload.decode()}"],
        ["close reply", f"opcode=0x{closed.opcode:x} code={closed.close_code}"],
    ]
    return {
        "live_handshake": table(HANDSHAKE_COLUMNS, rows),
        "live_frames": table(FRAME_COLUMNS, frame_rows(ws.log)),
    }
