"""The live stock socket through the real ASGI application (origin check, sessions)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client

from config.asgi import application
from library.models import Book
from library.permissions import CORRECT_STOCK, permission_get
from library.services import loan_issue
from messaging.models import OutboxMessage
from messaging.services import messaging_drain
from tests.asgi import Socket

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("redis_client"),
]
ORIGIN = (b"origin", b"http://127.0.0.1")


def session_cookie(*, staff: bool) -> tuple[bytes, bytes]:
    user = get_user_model().objects.create_user(
        "staffer" if staff else "visitor", password="x", is_staff=staff
    )
    if staff:
        user.user_permissions.add(permission_get(CORRECT_STOCK))
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


async def connect(branch_id: int = 1, headers=None) -> Socket:
    communicator = Socket(
        application, f"/ws/branches/{branch_id}/stock/", headers=headers or [ORIGIN]
    )
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def test_connect_sends_a_versioned_snapshot(library):
    ws = await connect()
    snapshot = await ws.receive_json_from()
    assert snapshot == {
        "type": "snapshot",
        "branch": 1,
        "version": 0,
        "total": 3,
        "books": [
            {"id": 1, "title": "Dune", "on_shelf": 2},
            {"id": 2, "title": "Emma", "on_shelf": 1},
        ],
        "watching": 1,  # this socket (realtime.presence)
    }
    await ws.disconnect()


async def test_foreign_origin_is_refused(library):
    communicator = Socket(
        application,
        "/ws/branches/1/stock/",
        headers=[(b"origin", b"http://evil.example")],
    )
    connected, _ = await communicator.connect()
    assert not connected


async def test_unknown_branch_closes_with_4404(library):
    communicator = Socket(application, "/ws/branches/99/stock/", headers=[ORIGIN])
    connected, code = await communicator.connect()
    assert (connected, code) == (False, 4404)


async def test_bad_frames_get_error_frames_and_the_connection_stays(library):
    ws = await connect()
    await ws.receive_json_from()
    await ws.send_to(text_data="{not json")
    assert (await ws.receive_json_from())["error"] == "invalid JSON"
    await ws.send_to(text_data=json.dumps({"action": "explode"}))
    assert (await ws.receive_json_from())["error"] == "unknown action 'explode'"
    await ws.send_to(text_data="[1, 2]")
    assert (await ws.receive_json_from())["type"] == "error"
    await ws.send_to(text_data=json.dumps({"action": "snapshot"}))
    assert (await ws.receive_json_from())["type"] == "snapshot"  # still usable
    await ws.disconnect()


async def test_oversized_frame_closes_the_socket(library):
    ws = await connect()
    await ws.receive_json_from()
    await ws.send_to(text_data=json.dumps({"action": "snapshot", "pad": "x" * 5000}))
    closed = await ws.receive_output()
    assert closed == {"type": "websocket.close", "code": 4009}


async def test_visitor_cannot_correct_a_count(library):
    cookie = await sync_to_async(session_cookie)(staff=False)
    ws = await connect(headers=[ORIGIN, cookie])
    await ws.receive_json_from()
    await ws.send_to(
        text_data=json.dumps({"action": "correct", "book": 1, "on_shelf": 9})
    )
    reply = await ws.receive_json_from()
    assert (reply["type"], reply["code"]) == ("error", "forbidden")
    assert (await Book.objects.aget(pk=1)).on_shelf == 2
    assert not await OutboxMessage.objects.aexists()
    await ws.disconnect()


async def test_staff_correction_is_validated_written_and_published(library):
    cookie = await sync_to_async(session_cookie)(staff=True)
    ws = await connect(headers=[ORIGIN, cookie])
    await ws.receive_json_from()
    for bad in (
        {"book": 1, "on_shelf": -1},
        {"book": "1", "on_shelf": 2},
        {"book": 1, "on_shelf": True},
        {"book": 3, "on_shelf": 2},
    ):
        await ws.send_to(text_data=json.dumps({"action": "correct", **bad}))
        assert (await ws.receive_json_from())["type"] == "error"
    await ws.send_to(
        text_data=json.dumps({"action": "correct", "book": 1, "on_shelf": 7})
    )
    assert await ws.receive_json_from() == {
        "type": "corrected",
        "book": 1,
        "on_shelf": 7,
    }
    assert (await Book.objects.aget(pk=1)).on_shelf == 7
    assert (await OutboxMessage.objects.aget()).type == "stock_corrected"
    await ws.disconnect()


async def test_a_loan_reaches_the_branch_socket_as_a_versioned_update(library):
    ws = await connect()
    other_branch = await connect(branch_id=2)
    await ws.receive_json_from()
    await other_branch.receive_json_from()
    await sync_to_async(loan_issue)(book_id=1, member_id=1)
    await sync_to_async(messaging_drain)(owner="test")
    update = await ws.receive_json_from(timeout=5)
    assert {k: update[k] for k in ("type", "version", "total", "book", "on_shelf")} == {
        "type": "update",
        "version": 1,
        "total": 2,
        "book": 1,
        "on_shelf": 1,
    }
    assert await other_branch.receive_nothing(timeout=0.3)
    await ws.disconnect()
    await other_branch.disconnect()
