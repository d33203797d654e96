"""Every middleware can run async, so a long request holds no thread in Django."""

from __future__ import annotations

import warnings

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

# Imported at collection, as daphne imports it at start: the static middleware reads
# DEBUG (finders, autorefresh) when the chain is built, and pytest-django turns DEBUG
# off only for the tests themselves.
from config.asgi import application
from config.static import StaticFilesMiddleware
from library.cache.pages import PageCacheMiddleware
from tests.asgi import http_exchange, http_scope


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


SITE_CSS = settings.BASE_DIR / "static/css/site.css"


@pytest.mark.parametrize(
    ("method", "headers", "status", "part"),
    [
        # Several of the response's 4 KiB blocks, each read off the event loop.
        ("GET", [], 200, slice(None)),
        ("HEAD", [], 200, slice(0, 0)),
        ("GET", [(b"range", b"bytes=10-29")], 206, slice(10, 30)),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_a_static_file_is_served_by_the_async_chain(method, headers, status, part):
    scope = http_scope("/static/css/site.css", method=method, headers=headers)

    async def fetch() -> tuple[int, bytes]:
        start, body = await http_exchange(application, scope)
        return start["status"], body

    with warnings.catch_warnings():
        # Django warns when it must drain a sync iterator for an async server.
        warnings.simplefilter("error", Warning)
        answer = async_to_sync(fetch)()
    assert answer == (status, SITE_CSS.read_bytes()[part])
