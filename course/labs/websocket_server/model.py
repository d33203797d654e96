"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from course.instruments.websocket_client import (
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
from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.websocket_server.params import WebsocketServerParams

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


def model(params: WebsocketServerParams, progress: Progress) -> Tables:
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
