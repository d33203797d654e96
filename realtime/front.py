"""Event streams and long polls served on the event loop, before Django's handler.

Django's ASGI handler runs each request in its own thread-sensitive context, and
its sync middleware hooks and ``request_started`` receivers keep that context's
thread for as long as the response lasts: one OS thread per open stream. The
stream views need none of that stack. Their reads go through
``realtime.polling.db_call`` (a small pool of its own, a connection per thread),
and their counters through async Redis. The job streams ask who may read the job
(``jobs.access``), so the front gives the request its session and user as Django's
middleware would, lazily: both are read on that pool, never on the loop. So
``StreamFront``
resolves the three stream routes itself, calls their async views directly on the
event loop, adds the headers the security middleware would, and drives the body,
cancelling it when the client leaves. An open stream is then a suspended coroutine
and a socket, nothing more.

Anything the rest of the stack must decide first goes to Django unchanged, as the
page tier does (``library.cache.pages.keys.page_key``): a request the security
middleware would redirect to HTTPS, a Host that is not allowed (400), a method
other than GET (the views' own 405 comes from Django).
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import aclosing
from importlib import import_module
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import get_user
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from django.http.response import HttpResponseBase, StreamingHttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import Resolver404, resolve
from django.utils.functional import SimpleLazyObject

from realtime import views

log = logging.getLogger("realtime")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

STREAM_VIEWS = frozenset({views.job_events, views.branch_events, views.job_wait})


async def _unused(request: Any) -> HttpResponse:  # the hooks below need a callable
    raise AssertionError("only process_response is used")


# Only their process_response is called: pure functions of the request's scheme
# and settings, the same headers a page from Django carries.
_HEADER_HOOKS = (SecurityMiddleware(_unused), XFrameOptionsMiddleware(_unused))


class StreamFront:
    """Serve the stream routes on the event loop; pass everything else on."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = self._stream_call(scope) if scope["type"] == "http" else None
        if call is None:
            await self.app(scope, receive, send)
            return
        view, request, kwargs = call
        await _serve(view(request, **kwargs), request, receive, send)

    def _stream_call(
        self, scope: Scope
    ) -> tuple[Any, ASGIRequest, dict[str, Any]] | None:
        if scope["method"] != "GET":
            return None
        request = ASGIRequest(scope, io.BytesIO())
        if settings.SECURE_SSL_REDIRECT and not request.is_secure():
            return None
        try:
            request.get_host()
            match = resolve(request.path_info)
        except (DisallowedHost, Resolver404):
            return None
        if match.func not in STREAM_VIEWS:
            return None
        _identify(request)
        return match.func, request, dict(match.kwargs)


def _identify(request: ASGIRequest) -> None:
    """Attach the session and user SessionMiddleware and AuthenticationMiddleware
    would, without reading either: the session store loads on first use, and the
    user is resolved by whoever asks, on the database pool."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    request.session = store(request.COOKIES.get(settings.SESSION_COOKIE_NAME))
    request.user = cast(Any, SimpleLazyObject(lambda: get_user(request)))


async def _serve(
    answering: Awaitable[HttpResponseBase],
    request: ASGIRequest,
    receive: Receive,
    send: Send,
) -> None:
    """Run the view and send its answer; stop both when the client disconnects."""
    started: list[bool] = []

    async def sending(message: MutableMapping[str, Any]) -> None:
        started.append(True)
        await send(message)

    work = asyncio.ensure_future(_answer(answering, request, sending))
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, gone):
            task.cancel()
        error, _ = await asyncio.gather(work, gone, return_exceptions=True)
    if isinstance(error, Exception):
        # The view raised: Django would log it and answer 500; so does this, or,
        # mid-stream, ends the body (a client reconnects and resumes by its id).
        log.error("stream request %s failed", request.path, exc_info=error)
        if not started:
            await _send_whole(HttpResponse("Server error\n", status=500), send)
        else:
            await send({"type": "http.response.body", "body": b""})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(
    answering: Awaitable[HttpResponseBase], request: ASGIRequest, send: Send
) -> None:
    response = await answering
    for hook in _HEADER_HOOKS:
        # Typed for HttpResponse; both only set headers, which any response has.
        response = hook.process_response(request, cast(HttpResponse, response))
    if isinstance(response, StreamingHttpResponse):
        await _send_stream(response, send)
    else:
        await _send_whole(response, send)


def _start(response: HttpResponseBase) -> dict[str, Any]:
    headers = [
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in response.items()
    ]
    return {
        "type": "http.response.start",
        "status": response.status_code,
        "headers": headers,
    }


async def _send_whole(response: HttpResponseBase, send: Send) -> None:
    assert isinstance(response, HttpResponse)
    start = _start(response)
    start["headers"].append((b"content-length", str(len(response.content)).encode()))
    await send(start)
    await send({"type": "http.response.body", "body": response.content})


async def _send_stream(response: StreamingHttpResponse, send: Send) -> None:
    await send(_start(response))
    # Closed at once on a disconnect (the cancel lands here), so the stream's own
    # finally blocks (its counters, its place under the limit) run now, not at GC.
    async with aclosing(cast(Any, aiter(response))) as content:
        async for part in content:
            await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
