"""Lab for "WebSocket Server": the upgrade, frames, ping and close, on the wire.

Model part: the lesson's ``ws-server.mjs`` ported to a small threaded TCP server in
this process (a plain request gets 426; an upgrade gets 101 with the accept key; a
text frame gets the ``ack``; ping gets pong with the same body; close is echoed),
driven by our raw client (``realtime.wsclient``) sending the lesson's three frames.
Nothing here depends on the machine, so the tables equal what the course prints:
the client's frames are masked (38, 8 and 10 bytes), the server's are not.

Live part: the same client against our daphne's live stock socket
(``/ws/branches/<id>/stock/``, the first branch of the database): the plain GET's
426, the handshake, the snapshot the server pushes, a ``snapshot`` request, ping,
and the closing handshake. Daphne answers a close with code 1000 and no reason.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from course.labs.harness.base import (
    Cell,
    Lab,
    LabError,
    Params,
    Progress,
    Tables,
    table,
)
from course.labs.harness.live_http import daphnes, host_header, request_headers
from library.models import Branch
from realtime.wsclient import (
    CLOSE,
    PING,
    PONG,
    TEXT,
    FrameRecord,
    RawWebSocket,
    accept_key,
    encode_frame,
    parse_frame,
    plain_get,
)

HANDSHAKE_COLUMNS: Final = ["check", "value"]
FRAME_COLUMNS: Final = ["direction", "opcode", "masked", "length"]
SPEC_KEY: Final = "dGhlIHNhbXBsZSBub25jZQ=="
# RFC 6455 section 1.3 prints this accept value for the sample key.
SPEC_ACCEPT: Final = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
PLAIN_BODY: Final = b"this endpoint only accepts WebSocket connections\n"


def _head(status: int, reason: str, headers: dict[str, str]) -> bytes:
    """Return a response's status line and headers, blank line included."""
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _serve_one(conn: socket.socket) -> None:
    """Serve one connection the way the lesson's ws-server.mjs does."""
    with conn:
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = conn.recv(4096)
            if not chunk:
                return
            raw += chunk
        head, buffer = raw.split(b"\r\n\r\n", 1)
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (
                line.partition(":") for line in head.decode().split("\r\n")[1:]
            )
        }
        key = headers.get("sec-websocket-key")
        if headers.get("upgrade", "").lower() != "websocket" or not key:
            plain = {
                "content-type": "text/plain",
                "upgrade": "websocket",
                "connection": "close",
                "content-length": str(len(PLAIN_BODY)),
            }
            conn.sendall(_head(426, "Upgrade Required", plain) + PLAIN_BODY)
            return
        switched = {
            "Sec-WebSocket-Accept": accept_key(key),
            "Connection": "Upgrade",
            "Upgrade": "websocket",
        }
        conn.sendall(_head(101, "Switching Protocols", switched))
        while True:
            frame = parse_frame(buffer)
            if frame is None:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                continue
            buffer = buffer[frame.consumed :]
            if frame.opcode == TEXT:
                message = json.loads(frame.payload)
                ack = {"type": "ack", "branch": message.get("branch"), "newStock": 41}
                reply = json.dumps(ack, separators=(",", ":")).encode()
                conn.sendall(encode_frame(TEXT, reply))
            elif frame.opcode == PING:
                conn.sendall(encode_frame(PONG, frame.payload))
            elif frame.opcode == CLOSE:
                conn.sendall(encode_frame(CLOSE, frame.payload))
                return


@contextmanager
def lesson_server() -> Iterator[int]:
    """Run the lesson's server on a free local port; yield the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(10)

    def accept_loop() -> None:
        for _ in range(2):  # the plain request, then the client
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            _serve_one(conn)

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()
        thread.join(timeout=10)


def frame_rows(log: list[FrameRecord]) -> list[list[Cell]]:
    return [
        [r.direction, f"0x{r.opcode:x}", "true" if r.masked else "false", r.length]
        for r in log
    ]


def _spec_rows() -> list[list[Cell]]:
    spec = accept_key(SPEC_KEY)
    return [
        ["sample key", SPEC_KEY],
        ["sample accept", spec],
        ["sample equals the specification", "true" if spec == SPEC_ACCEPT else "false"],
    ]


def model(params: Params, progress: Progress) -> Tables:
    progress(0.1, "the lesson's server on a local port")
    with lesson_server() as port:
        status, headers, _ = plain_get("127.0.0.1", port, "/channel")
        ws = RawWebSocket.connect("127.0.0.1", port, "/channel")
        lesson_text = {"type": "stock", "branch": 3, "delta": -1}
        ws.send(TEXT, json.dumps(lesson_text, separators=(",", ":")).encode())
        text = ws.receive()
        ws.send(PING, b"is-alive")
        pong = ws.receive()
        closed = ws.close(1000, "job done")
    rows: list[list[Cell]] = [
        *_spec_rows(),
        ["plain request", status],
        ["plain request upgrade header", headers.get("upgrade", "")],
        ["status line", ws.handshake.status_line],
        ["accept key", "correct" if ws.handshake.accept_correct else "incorrect"],
        ["text reply", f"{text.payload.decode()} (masked={str(text.masked).lower()})"],
        ["ping reply", f"opcode=0x{pong.opcode:x} {pong.payload.decode()}"],
        ["close reply", f"opcode=0x{closed.opcode:x} code={closed.close_code}"],
    ]
    return {
        "handshake": table(HANDSHAKE_COLUMNS, rows),
        "frames": table(FRAME_COLUMNS, frame_rows(ws.log)),
    }


# --- live ----------------------------------------------------------------------------


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


LAB = Lab(
    slug="websocket-server",
    title="WebSocket Server",
    params=(),
    model=model,
    live=live,
    notes=(
        "Frames are logged by our raw-socket client: the client masks every frame, "
        "the server never does. The live part talks to the live stock socket."
    ),
)
