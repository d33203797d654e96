"""A WebSocket client over a raw socket: handshake, frames, ping and close by hand.

No WebSocket library is involved, so every step the lesson names is visible:

- the upgrade request with a random 16-byte ``Sec-WebSocket-Key``, and the check
  that ``Sec-WebSocket-Accept`` is base64(SHA-1(key + GUID)) (RFC 6455 section 4);
- frames written with FIN, opcode, the mask bit, a 7/16/64-bit length and, from a
  client, a random 4-byte mask applied to the payload (section 5.2);
- a byte-stream reader that keeps a partial frame until the rest arrives;
- ping answered by pong with the same body, and the closing handshake: our close
  frame, the peer's close frame back, then the TCP close.

Every frame sent or received is logged as ``FrameRecord`` (direction, opcode, masked,
length): the websocket-server lab prints that log.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import Final

GUID: Final = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT: Final = 0x1
BINARY: Final = 0x2
CLOSE: Final = 0x8
PING: Final = 0x9
PONG: Final = 0xA
OPCODE_NAMES: Final = {
    0x0: "continuation",
    TEXT: "text",
    BINARY: "binary",
    CLOSE: "close",
    PING: "ping",
    PONG: "pong",
}


class WebSocketError(Exception):
    """The peer broke the protocol or the connection ended unexpectedly."""


def accept_key(key: str) -> str:
    """Return the Sec-WebSocket-Accept value a server must answer to ``key``."""
    digest = hashlib.sha1((key + GUID).encode("ascii")).digest()
    return base64.b64encode(digest).decode("ascii")


def encode_frame(
    opcode: int, payload: bytes, *, mask: bytes | None = None, fin: bool = True
) -> bytes:
    """Return one frame; ``mask`` (4 bytes) masks it, as every client frame must be."""
    size = len(payload)
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if mask is not None else 0
    if size < 126:
        header = struct.pack("!BB", first, mask_bit | size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", first, mask_bit | 126, size)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, size)
    if mask is None:
        return header + payload
    if len(mask) != 4:
        raise ValueError("a mask key is four bytes")
    return header + mask + apply_mask(payload, mask)


def apply_mask(payload: bytes, mask: bytes) -> bytes:
    """XOR ``payload`` with the repeated 4-byte ``mask`` (masking and unmasking)."""
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    return bytes(a ^ b for a, b in zip(payload, repeated, strict=True))


@dataclass(frozen=True)
class Frame:
    opcode: int
    fin: bool
    masked: bool
    payload: bytes
    consumed: int  # bytes of the buffer this frame took, header included

    @property
    def close_code(self) -> int | None:
        if self.opcode != CLOSE:
            return None
        return (
            struct.unpack("!H", self.payload[:2])[0] if len(self.payload) >= 2 else 1005
        )


def parse_frame(buffer: bytes) -> Frame | None:
    """Parse the first frame of ``buffer``; return None while it is incomplete."""
    if len(buffer) < 2:
        return None
    fin, opcode = bool(buffer[0] & 0x80), buffer[0] & 0x0F
    masked, size, offset = bool(buffer[1] & 0x80), buffer[1] & 0x7F, 2
    if size == 126:
        if len(buffer) < 4:
            return None
        size, offset = struct.unpack("!H", buffer[2:4])[0], 4
    elif size == 127:
        if len(buffer) < 10:
            return None
        size, offset = struct.unpack("!Q", buffer[2:10])[0], 10
    mask = buffer[offset : offset + 4] if masked else None
    offset += 4 if masked else 0
    if len(buffer) < offset + size:
        return None
    payload = buffer[offset : offset + size]
    if mask is not None:
        payload = apply_mask(payload, mask)
    return Frame(opcode, fin, masked, payload, offset + size)


@dataclass(frozen=True)
class FrameRecord:
    direction: str  # "client→server" or "server→client"
    opcode: int
    masked: bool
    length: int

    @property
    def opcode_text(self) -> str:
        return f"0x{self.opcode:x} ({OPCODE_NAMES.get(self.opcode, '?')})"


@dataclass
class Handshake:
    status_line: str
    headers: dict[str, str]
    key: str

    @property
    def accept_correct(self) -> bool:
        return self.headers.get("sec-websocket-accept") == accept_key(self.key)


@dataclass
class RawWebSocket:
    """One client connection; ``connect`` does the handshake."""

    sock: socket.socket
    handshake: Handshake
    log: list[FrameRecord] = field(default_factory=list)
    _buffer: bytes = b""

    @classmethod
    def connect(
        cls,
        host: str,
        port: int,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
        key: str | None = None,
    ) -> RawWebSocket:
        """Open a TCP connection and upgrade it; raise WebSocketError unless 101."""
        key = key or base64.b64encode(os.urandom(16)).decode("ascii")
        sock = socket.create_connection((host, port), timeout=timeout)
        extra = dict(headers or {})
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {extra.pop('Host', f'{host}:{port}')}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{name}: {value}" for name, value in extra.items()),
        ]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = sock.recv(4096)
            if not chunk:
                sock.close()
                raise WebSocketError("the server closed during the handshake")
            raw += chunk
        head, rest = raw.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        parsed = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in header_lines)
        }
        handshake = Handshake(status_line, parsed, key)
        if " 101 " not in f"{status_line} ":
            sock.close()
            raise WebSocketError(f"upgrade refused: {status_line}")
        return cls(sock, handshake, _buffer=rest)

    def send(self, opcode: int, payload: bytes) -> None:
        """Send one masked frame (a client must mask every frame)."""
        self.sock.sendall(encode_frame(opcode, payload, mask=os.urandom(4)))
        self.log.append(FrameRecord("client→server", opcode, True, len(payload)))

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are: for tests of what a server does with bad frames."""
        self.sock.sendall(data)

    def receive(self) -> Frame:
        """Return the next whole frame, reading as many TCP segments as it takes."""
        while True:
            frame = parse_frame(self._buffer)
            if frame is not None:
                self._buffer = self._buffer[frame.consumed :]
                self.log.append(
                    FrameRecord(
                        "server→client", frame.opcode, frame.masked, len(frame.payload)
                    )
                )
                return frame
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WebSocketError("the connection closed before a whole frame")
            self._buffer += chunk

    def receive_until(self, opcode: int) -> Frame:
        """Return the next frame with ``opcode``, skipping (but logging) others."""
        while True:
            frame = self.receive()
            if frame.opcode == opcode:
                return frame

    def close(self, code: int = 1000, reason: str = "") -> Frame:
        """Run the closing handshake; return the server's close frame."""
        self.send(CLOSE, struct.pack("!H", code) + reason.encode())
        try:
            return self.receive_until(CLOSE)
        finally:
            self.sock.close()

    def abort(self) -> None:
        """Drop the TCP connection without a closing handshake."""
        self.sock.close()


def plain_get(
    host: str, port: int, path: str, *, headers: dict[str, str] | None = None
) -> tuple[str, dict[str, str], bytes]:
    """Send a plain HTTP/1.1 GET (no upgrade); return status line, headers, body."""
    extra = dict(headers or {})
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {extra.pop('Host', f'{host}:{port}')}",
        "Connection: close",
    ]
    lines += [f"{name}: {value}" for name, value in extra.items()]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in header_lines)
    }
    return status_line, parsed, body
