"""Every middleware can run async, so a long request holds no thread in Django."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler

from config.static import StaticFilesMiddleware
from library.cache.pages import PageCacheMiddleware
from tests.asgi import http_scope


def test_the_asgi_chain_is_async_from_end_to_end() -> None:
    handler = ASGIHandler()  # loads the middleware in async mode, as daphne does
    # Django wraps the outermost middleware in its exception handler (functools.wraps).
    outermost = handler._middleware_chain.__wrapped__  # type: ignore[attr-defined]
    assert isinstance(outermost, PageCacheMiddleware)
    # Had any middleware below been sync-only, Django would have handed the outer
    # ones a sync get_response (and run the chain in a thread per request).
    assert outermost.async_mode is True


def test_the_wsgi_style_chain_still_runs_sync() -> None:
    middleware = StaticFilesMiddleware(lambda request: None)
    assert middleware.async_mode is False


@pytest.mark.django_db(transaction=True)
def test_a_static_file_is_served_by_the_async_chain() -> None:
    from config.asgi import application

    scope = http_scope("/static/css/live.css", host="testserver")

    async def fetch() -> tuple[int, bytes]:
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": b""})
        start = await communicator.receive_output(10)
        body = b""
        while True:
            message = await communicator.receive_output(10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        return start["status"], body

    status, body = async_to_sync(fetch)()
    assert status == 200
    assert b"{" in body  # a stylesheet
