"""The ASGI front of the shared lesson page: answered on the event loop, no Django.

``course.lesson_cache`` keeps the page every visitor without a session shares. The
view still ran Django's whole middleware stack to hand it out (sessions, auth, CSRF,
messages: most of the request's time once the template is skipped). This front
answers such a request before Django is entered, from the same stored page and the
headers that stack added to it the last time Django answered it (captured here, on
the way out), with a CSRF token of the visitor's own:

- a visitor without a CSRF cookie gets a new secret in a cookie set exactly as
  Django's CSRF middleware sets it (name, age, path, domain, Secure, HttpOnly,
  SameSite from the settings), and a token masked from it by ``get_token``;
- a visitor with a well-formed CSRF cookie gets a token masked from its secret;
- anything else (a session, a flash message, a query string, a malformed cookie, a
  host that is not allowed, plain HTTP the security middleware would redirect, CSRF
  kept in sessions) goes to Django unchanged.
"""

from __future__ import annotations

import re
from typing import Any, Final

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token

from course.front import front_pass, front_send, front_visitor
from course.lesson_cache import (
    SHARED_HEADER,
    headers_store,
    shared_response,
    shared_stored,
)

_LESSON_PATH: Final = re.compile(r"/course/(?P<slug>[-a-zA-Z0-9_]+)/")
# Django's secret: 32 letters and digits (django.middleware.csrf.CSRF_SECRET_LENGTH).
_SECRET: Final = re.compile(r"[a-zA-Z0-9]{32}")
# Per response or per visitor: never replayed from the captured headers.
_NOT_REPLAYED: Final = frozenset(
    {"content-length", "content-encoding", "set-cookie", SHARED_HEADER.lower()}
)


class LessonPageASGI:
    """Answer the shared lesson page before Django; capture its headers on misses."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        key = self._candidate(scope)
        if key is None:
            await self.app(scope, receive, send)
            return
        request, slug_site = key
        stored = shared_stored(slug_site)
        if stored is not None:
            answer = _answer(request, *stored)
            if answer is not None:
                await front_send(send, answer)
                return
        await front_pass(
            self.app, scope, receive, send, lambda start: _capture(slug_site, start)
        )

    def _candidate(self, scope: Any) -> tuple[HttpRequest, tuple[str, str]] | None:
        if scope["type"] != "http":
            return None
        if scope.get("query_string") or settings.CSRF_USE_SESSIONS:
            return None
        match = _LESSON_PATH.fullmatch(scope["path"])
        if match is None:
            return None
        visitor = front_visitor(scope)
        if visitor is None:
            return None
        request, site = visitor
        return request, (match["slug"], site)


def _capture(key: tuple[str, str], message: Any) -> None:
    """Keep the headers of a shared page as the whole stack sent them."""
    headers = [
        (k.decode("latin-1"), v.decode("latin-1")) for k, v in message["headers"]
    ]
    if message["status"] != 200:
        return
    if not any(name.lower() == SHARED_HEADER.lower() for name, _ in headers):
        return  # not the shared variant (the view rendered it for this visitor)
    kept = [(n, v) for n, v in headers if n.lower() not in _NOT_REPLAYED]
    headers_store(key, kept)


def _answer(
    request: HttpRequest, html: str, headers: list[tuple[str, str]]
) -> HttpResponse | None:
    """Return the page with this visitor's token, or None: Django must answer."""
    secret = request.COOKIES.get(settings.CSRF_COOKIE_NAME)
    meta: dict[str, Any] = {}
    if secret is not None:
        if _SECRET.fullmatch(secret) is None:
            return None  # Django's middleware replaces a bad cookie: let it
        meta["CSRF_COOKIE"] = secret
    holder = HttpRequest()
    holder.META = meta
    token = get_token(holder)  # masked afresh; a new secret when there was none
    response = shared_response(request, html, token)
    for name, value in headers:
        if name.lower() != "vary":  # shared_response's, with Accept-Encoding
            response[name] = value
    response[SHARED_HEADER] = "front"
    if secret is None:
        # As django.middleware.csrf.CsrfViewMiddleware._set_csrf_cookie does.
        response.set_cookie(
            settings.CSRF_COOKIE_NAME,
            holder.META["CSRF_COOKIE"],
            max_age=settings.CSRF_COOKIE_AGE,
            domain=settings.CSRF_COOKIE_DOMAIN,
            path=settings.CSRF_COOKIE_PATH,
            secure=settings.CSRF_COOKIE_SECURE,
            httponly=settings.CSRF_COOKIE_HTTPONLY,
            samesite=settings.CSRF_COOKIE_SAMESITE,
        )
    return response
