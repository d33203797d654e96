"""A plain HTTP request to a WebSocket route gets 426 Upgrade Required, not a 404.

Daphne hands a request to Channels only when it asks to upgrade; without the
``Upgrade: websocket`` header the same path reaches Django. Every route of
``realtime.routing`` is mirrored here so that such a request learns what the path
speaks (``Upgrade: websocket``, a one-line body) instead of a page-not-found.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, re_path
from django.views.decorators.cache import never_cache

from realtime.routing import websocket_urlpatterns

UPGRADE_BODY = "this address only accepts WebSocket connections\n"

try:  # Twisted (under daphne) has no reason phrase for 426 and would say "Unknown".
    from twisted.web import http as _twisted_http

    _twisted_http.RESPONSES.setdefault(426, b"Upgrade Required")
except ImportError:  # pragma: no cover - daphne depends on Twisted
    pass


@never_cache
def upgrade_required(request: HttpRequest, **kwargs: object) -> HttpResponse:
    """Answer 426 with the protocol to upgrade to (RFC 9110, section 15.5.22)."""
    response = HttpResponse(
        UPGRADE_BODY, status=426, content_type="text/plain; charset=utf-8"
    )
    response["Upgrade"] = "websocket"
    response["Connection"] = "Upgrade"
    return response


def _mirror(pattern: object) -> URLPattern:
    regex = pattern.pattern.regex.pattern  # type: ignore[attr-defined]
    return re_path(regex, upgrade_required)


urlpatterns: list[URLPattern] = [_mirror(p) for p in websocket_urlpatterns]
