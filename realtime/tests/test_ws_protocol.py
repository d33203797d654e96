"""The WebSocket protocol on the wire, against a real daphne, with our raw client.

The frame codec is checked on its own first (RFC 6455's sample key, every length
form, a frame split across reads); then the live stock route: a plain GET answers
426, the handshake's accept key, masked client frames, ping/pong, the closing
handshake, and what the server does with frames that break the protocol.
"""

from __future__ import annotations

import struct

import pytest
from django.test import Client

from config.processes import free_port, start_daphne, stop
from course.instruments import websocket_client
from course.instruments.websocket_client import (
    BINARY,
    CLOSE,
    PING,
    PONG,
    TEXT,
    RawWebSocket,
    accept_key,
    encode_frame,
    parse_frame,
    plain_get,
)
from library.models import Book, Branch

PATH = "/ws/branches/1/stock/"


# --- the codec ----------------------------------------------------------------


def test_accept_key_matches_the_specification_sample():
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize(("size", "header"), [(0, 2), (125, 2), (126, 4), (70_000, 10)])
def test_frames_round_trip_in_every_length_form(size, header):
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    masked = encode_frame(BINARY, payload, mask=b"\x01\x02\x03\x04")
    assert len(masked) == header + 4 + size
    assert masked[1] & 0x80  # the mask bit
    frame = parse_frame(masked + b"next")
    assert frame is not None
    assert (frame.opcode, frame.fin, frame.masked, frame.payload) == (
        BINARY,
        True,
        True,
        payload,
    )
    assert frame.consumed == len(masked)
    unmasked = encode_frame(TEXT, payload)
    assert len(unmasked) == header + size
    assert not unmasked[1] & 0x80


def test_an_incomplete_frame_waits_for_the_rest():
    whole = encode_frame(TEXT, b"x" * 300, mask=b"abcd")
    for cut in (1, 3, 8, len(whole) - 1):
        assert parse_frame(whole[:cut]) is None
    assert parse_frame(whole) is not None


def test_masking_hides_the_payload_bytes():
    frame = encode_frame(TEXT, b'{"action":"snapshot"}', mask=b"\x0f\xf0\xaa\x55")
    assert b"snapshot" not in frame


# --- plain HTTP on the route, in process -------------------------------------------


@pytest.mark.django_db
def test_plain_get_of_a_socket_route_is_426_with_the_upgrade_header():
    response = Client().get(PATH)
    assert response.status_code == 426
    assert response["Upgrade"] == "websocket"
    assert response.content == b"this address only accepts WebSocket connections\n"
    assert "no-store" in response["Cache-Control"]


# --- a real daphne -------------------------------------------------------------------


@pytest.fixture
def server(transactional_db):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=5)
    port = free_port()
    process = start_daphne(port)
    try:
        yield port
    finally:
        stop(process)


def connect(port: int) -> RawWebSocket:
    return RawWebSocket.connect(
        "127.0.0.1", port, PATH, headers={"Origin": f"http://127.0.0.1:{port}"}
    )


@pytest.mark.processes
def test_real_server_answers_plain_http_with_426(server):
    status, headers, body = plain_get("127.0.0.1", server, PATH)
    assert status == "HTTP/1.1 426 Upgrade Required"
    assert headers["upgrade"] == "websocket"
    assert body == b"this address only accepts WebSocket connections\n"


@pytest.mark.processes
def test_handshake_frames_ping_and_close_with_a_real_server(server):
    ws = connect(server)
    assert ws.handshake.status_line == "HTTP/1.1 101 Switching Protocols"
    assert ws.handshake.accept_correct
    snapshot = ws.receive()
    assert snapshot.opcode == TEXT
    assert not snapshot.masked
    assert b'"type":"snapshot"' in snapshot.payload

    ws.send(TEXT, b'{"action":"snapshot"}')
    assert ws.receive().payload == snapshot.payload
    ws.send(PING, b"is-alive")
    pong = ws.receive()
    assert (pong.opcode, pong.payload) == (PONG, b"is-alive")
    reply = ws.close(1000, "job done")
    assert (reply.opcode, reply.close_code) == (CLOSE, 1000)

    assert [(r.direction, r.opcode, r.masked) for r in ws.log] == [
        ("server→client", TEXT, False),
        ("client→server", TEXT, True),
        ("server→client", TEXT, False),
        ("client→server", PING, True),
        ("server→client", PONG, False),
        ("client→server", CLOSE, True),
        ("server→client", CLOSE, False),
    ]
    assert [r.length for r in ws.log][1::2] == [21, 8, 10]


@pytest.mark.processes
def test_a_wrong_accept_key_is_detected(server):
    ws = connect(server)
    ws.handshake.key = "c29tZSBvdGhlciBrZXkhIQ=="  # as if the server answered another
    assert not ws.handshake.accept_correct
    ws.abort()


def dropped(ws: RawWebSocket) -> bool:
    """Return True when the server cut the TCP connection without a close frame."""
    try:
        ws.receive_until(CLOSE)
    except (websocket_client.WebSocketError, ConnectionResetError):
        return True
    return False


# Autobahn (daphne's WebSocket engine) fails a connection that breaks the protocol
# by dropping it (failByDrop), not with a close frame: no further frame arrives.
@pytest.mark.processes
def test_an_unmasked_client_frame_drops_the_connection(server):
    ws = connect(server)
    ws.receive()
    ws.send_raw(encode_frame(TEXT, b'{"action":"snapshot"}'))  # no mask
    assert dropped(ws)


@pytest.mark.processes
def test_text_that_is_not_utf8_drops_the_connection(server):
    ws = connect(server)
    ws.receive()
    ws.send(TEXT, b"\xff\xfe not text")
    assert dropped(ws)


@pytest.mark.processes
def test_a_reserved_opcode_drops_the_connection(server):
    ws = connect(server)
    ws.receive()
    ws.send_raw(encode_frame(0x3, b"?", mask=b"abcd"))  # 0x3 is reserved
    assert dropped(ws)
    # The server itself is fine: the next client is served.
    assert b"snapshot" in connect(server).receive().payload


@pytest.mark.processes
def test_bad_requests_get_error_frames_and_oversized_frames_4009(server):
    ws = connect(server)
    ws.receive()
    ws.send(TEXT, b"{not json")
    assert b'"code":"bad_request"' in ws.receive().payload
    ws.send(BINARY, b"\x00\x01")
    assert b"binary frames are not understood" in ws.receive().payload
    ws.send(TEXT, b'{"action":"snapshot","pad":"' + b"x" * 5000 + b'"}')
    assert ws.receive_until(CLOSE).close_code == 4009


@pytest.mark.processes
def test_a_close_frame_is_answered_then_the_tcp_connection_closes(server):
    ws = connect(server)
    ws.receive()
    ws.send(CLOSE, struct.pack("!H", 4000) + b"bye")
    # Autobahn answers a client's close with 1000 whatever code it was sent.
    assert ws.receive_until(CLOSE).close_code == 1000
    with pytest.raises((websocket_client.WebSocketError, OSError)):
        ws.receive()  # the server closed the TCP connection after its close frame
