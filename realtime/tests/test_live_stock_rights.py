"""An open shelf socket keeps no rights of its own: each correction asks the session.

The socket's scope holds the user read at connect; a logout, a deactivation or a
revoked permission afterwards must stop the very next ``correct`` frame on the same
socket, through the real ASGI application and the real session store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client

from config.asgi import application
from library.models import Book
from library.permissions import CORRECT_STOCK, permission_get
from tests.asgi import Socket

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("redis_client"),
]
ORIGIN = (b"origin", b"http://127.0.0.1")


def signed_in(*, may_correct: bool = True) -> tuple[User, Client]:
    """Sign in through the login form, so the session lives in the session store."""
    user = get_user_model().objects.create_user("desk", password="x", is_staff=True)
    if may_correct:
        user.user_permissions.add(permission_get(CORRECT_STOCK))
    client = Client()
    response = client.post("/accounts/login/", {"login": "desk", "password": "x"})
    assert response.status_code == 302
    assert "sessionid" in client.cookies
    return user, client


async def open_socket(client: Client) -> Socket:
    cookie = (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())
    ws = Socket(application, "/ws/branches/1/stock/", headers=[ORIGIN, cookie])
    connected, _ = await ws.connect()
    assert connected
    assert (await ws.receive_json_from())["type"] == "snapshot"
    return ws


async def correct(ws: Socket, on_shelf: int) -> dict[str, Any]:
    await ws.send_to(
        text_data=json.dumps({"action": "correct", "book": 1, "on_shelf": on_shelf})
    )
    reply: dict[str, Any] = await ws.receive_json_from()
    return reply


async def on_shelf() -> int:
    return (await Book.objects.aget(pk=1)).on_shelf


async def test_correction_is_refused_on_the_same_socket_after_logout(library):
    _, client = await sync_to_async(signed_in)()
    session_key = client.cookies["sessionid"].value
    ws = await open_socket(client)
    assert await correct(ws, 7) == {"type": "corrected", "book": 1, "on_shelf": 7}

    await sync_to_async(client.post)("/accounts/logout/")
    assert not await Session.objects.filter(session_key=session_key).aexists()

    reply = await correct(ws, 9)
    assert (reply["type"], reply["code"]) == ("error", "forbidden")
    assert await on_shelf() == 7  # the first correction stands, the second never ran
    await ws.disconnect()


def _deactivate(user: User) -> None:
    user.is_active = False
    user.save(update_fields=["is_active"])


def _revoke(user: User) -> None:
    user.user_permissions.remove(permission_get(CORRECT_STOCK))


@pytest.mark.parametrize(
    "change", [_deactivate, _revoke], ids=["deactivated", "revoked"]
)
async def test_a_change_of_rights_reaches_an_open_socket(
    library, change: Callable[[User], None]
):
    user, client = await sync_to_async(signed_in)()
    ws = await open_socket(client)
    assert (await correct(ws, 5))["type"] == "corrected"

    await sync_to_async(change)(user)

    reply = await correct(ws, 6)
    assert (reply["type"], reply["code"]) == ("error", "forbidden")
    assert await on_shelf() == 5
    await ws.disconnect()


async def test_staff_without_the_permission_cannot_correct(library):
    _, client = await sync_to_async(signed_in)(may_correct=False)
    ws = await open_socket(client)
    reply = await correct(ws, 9)
    assert (reply["type"], reply["code"]) == ("error", "forbidden")
    assert await on_shelf() == 2
    await ws.disconnect()
