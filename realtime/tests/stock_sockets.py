"""A socket on branch 1's live-shelf feed, opened through the ASGI application (the
``stock_branch`` fixture, in this folder's conftest, makes the branch)."""

from __future__ import annotations

from config.asgi import application
from tests.asgi import Socket

ORIGIN = (b"origin", b"http://127.0.0.1")
GROUP = "branch-1"


async def open_socket() -> Socket:
    ws = Socket(application, "/ws/branches/1/stock/", headers=[ORIGIN])
    connected, _ = await ws.connect()
    assert connected
    assert (await ws.receive_json_from())["type"] == "snapshot"
    return ws
