"""What the course's ASGI fronts share: who they may answer, and how they send.

A front (``course.lesson_front``, ``course.explore_front``) answers a request on the
event loop before Django is entered, so it must leave to Django everything the
stack has to see first: plain HTTP the security middleware would redirect, a Host
that is not allowed (Django answers 400), and a visitor with a session or a flash
message (their page may be their own).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse


def front_visitor(scope: Any) -> tuple[ASGIRequest, str] | None:
    """Return the request and its site (scheme and host) if a front may answer it:
    a GET with no session and no flash message, over HTTPS where the settings
    redirect plain HTTP, to an allowed host. None: leave it to Django."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return None
    request = ASGIRequest(scope, io.BytesIO())
    if settings.SECURE_SSL_REDIRECT and not request.is_secure():
        return None
    try:
        site = request.build_absolute_uri("/")
    except DisallowedHost:
        return None
    cookies = request.COOKIES
    if settings.SESSION_COOKIE_NAME in cookies or "messages" in cookies:
        return None
    return request, site


async def front_send(send: Any, response: HttpResponse) -> None:
    """Send a Django response over ASGI: its status, headers, cookies and body."""
    headers = [
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in response.items()
    ]
    headers.extend(
        (b"set-cookie", cookie.output(header="").encode("ascii").strip())
        for cookie in response.cookies.values()
    )
    body = response.content
    if response.status_code != 304 and not response.has_header("Content-Length"):
        headers.append((b"content-length", str(len(body)).encode()))
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": headers,
        }
    )
    await send({"type": "http.response.body", "body": body})


async def front_pass(
    app: Any, scope: Any, receive: Any, send: Any, started: Callable[[Any], None]
) -> None:
    """Leave the request to ``app`` (Django), showing ``started`` the response's
    start message on its way out (where a front captures the stack's headers)."""

    async def watched(message: Any) -> None:
        if message["type"] == "http.response.start":
            started(message)
        await send(message)

    await app(scope, receive, watched)
