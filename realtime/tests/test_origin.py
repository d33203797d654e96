"""The WebSocket origin check compares scheme, host and port (realtime.origin).

Handshakes go through the real ASGI application (``config.asgi``) with the suite's
Socket, and once through a real daphne with the ``websockets`` client.
"""

from __future__ import annotations

import asyncio

import pytest
import websockets
from django.test import override_settings
from websockets.typing import Origin

from config.asgi import application
from config.processes import free_port, start_daphne, stop
from tests.asgi import Socket

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_client"),
]
PATH = "/ws/branches/1/stock/"


async def handshake(host: str, origin: str | None, *, scheme: str = "ws") -> bool:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    socket = Socket(application, PATH, headers=headers)
    socket.scope["scheme"] = scheme
    connected, _ = await socket.connect()
    if connected:
        await socket.disconnect()
    return bool(connected)


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("127.0.0.1", "http://127.0.0.1"),
        ("127.0.0.1", "http://127.0.0.1:80"),  # the default port is no port
        ("localhost:8000", "HTTP://LocalHost:8000"),
    ],
)
async def test_the_sites_own_origin_is_accepted(library, host, origin):
    assert await handshake(host, origin)


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:9999"),  # another port, same host
        ("127.0.0.1:8000", "http://127.0.0.1"),  # port 80 is not 8000
        ("127.0.0.1", "http://127.0.0.1:8080"),
        ("127.0.0.1:8000", "https://127.0.0.1:8000"),  # another scheme
        ("127.0.0.1:8000", "http://localhost:8000"),  # another (allowed) host
        ("127.0.0.1:8000", "http://evil.example:8000"),
        ("evil.example", "http://evil.example"),  # a Host the site does not serve
        ("127.0.0.1:8000", "null"),
        ("127.0.0.1:8000", "http://127.0.0.1:notaport"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000/page"),
        ("127.0.0.1:8000", "http://user@127.0.0.1:8000"),
        ("127.0.0.1:8000", None),  # no Origin at all
    ],
)
async def test_any_other_origin_is_refused(library, host, origin):
    assert not await handshake(host, origin)


async def test_a_secure_handshake_wants_the_https_origin(library):
    assert await handshake("127.0.0.1", "https://127.0.0.1", scheme="wss")
    assert not await handshake("127.0.0.1", "http://127.0.0.1", scheme="wss")


@override_settings(
    CSRF_TRUSTED_ORIGINS=["https://library.example.org", "https://*.example.net:8443"]
)
async def test_trusted_origins_match_scheme_host_and_port(library):
    # A proxy in front may change the Host; the trusted origins still name the page.
    assert await handshake("127.0.0.1:8000", "https://library.example.org")
    assert not await handshake("127.0.0.1:8000", "https://library.example.org:444")
    assert not await handshake("127.0.0.1:8000", "http://library.example.org")
    assert await handshake("127.0.0.1:8000", "https://shelf.example.net:8443")
    assert not await handshake("127.0.0.1:8000", "https://shelf.example.net")
    assert not await handshake("127.0.0.1:8000", "https://example.net.evil:8443")


@pytest.mark.processes
def test_a_real_server_refuses_another_port_and_accepts_its_own(library):
    port = free_port()
    server = start_daphne(port)

    async def attempt(origin: str) -> int:
        try:
            async with websockets.connect(
                f"ws://127.0.0.1:{port}{PATH}", origin=Origin(origin), open_timeout=20
            ) as socket:
                await socket.recv()  # the snapshot
                return 101
        except websockets.exceptions.InvalidStatus as refused:
            return int(refused.response.status_code)

    try:
        assert asyncio.run(attempt(f"http://127.0.0.1:{port + 1}")) == 403
        assert asyncio.run(attempt("http://127.0.0.1:9999")) == 403
        assert asyncio.run(attempt(f"https://127.0.0.1:{port}")) == 403
        assert asyncio.run(attempt(f"http://127.0.0.1:{port}")) == 101
    finally:
        stop(server)
