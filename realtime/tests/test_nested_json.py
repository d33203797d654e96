"""A frame of deeply nested JSON gets an error frame; the live shelf socket stays."""

from __future__ import annotations

import json

import pytest

from config.asgi import application
from tests.asgi import Socket

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("redis_client"),
]
ORIGIN = (b"origin", b"http://127.0.0.1")


@pytest.mark.parametrize(
    "frame",
    ["[" * 2000, "[" * 4000, '[{"a":' * 600, "[" * 1500 + "]" * 1500],
    ids=["open-2000", "open-4000", "mixed-1200", "closed-1500"],
)
async def test_deeply_nested_json_gets_an_error_frame_and_the_socket_stays(
    library, frame
):
    ws = Socket(application, "/ws/branches/1/stock/", headers=[ORIGIN])
    connected, _ = await ws.connect()
    assert connected
    assert (await ws.receive_json_from())["type"] == "snapshot"
    await ws.send_to(text_data=frame)
    reply = await ws.receive_json_from()
    assert (reply["type"], reply["code"]) == ("error", "bad_request")
    await ws.send_to(text_data=json.dumps({"action": "snapshot"}))
    assert (await ws.receive_json_from())["type"] == "snapshot"  # still usable
    await ws.disconnect()
