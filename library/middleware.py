"""Request-handling middleware of the site (the page tier has its own, in cache/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.cache import patch_vary_headers

# Revalidate on every use and keep out of shared caches; a view that wants more
# (``no-store`` for a form, a max-age for history) says so and is left alone, as
# long as what it says keeps the page out of shared caches (``private_directives``).
SIGNED_IN: Final = "private, no-cache"


def private_directives(directives: str | None) -> str:
    """Return ``directives`` that keep a response out of shared caches.

    None (the view said nothing) becomes ``SIGNED_IN``. Directives that already
    forbid a shared cache (``private``, ``no-store``) are kept as they are.
    Otherwise ``public`` is dropped and ``private`` put first, keeping the view's
    freshness for the browser: a shared cache may store a response with a
    ``max-age`` alone, and one marked ``public`` for everyone (the source view's
    was) would hand the next visitor a body with this user's name and CSRF token.
    """
    if directives is None:
        return SIGNED_IN
    parts = [part.strip() for part in directives.split(",") if part.strip()]
    lowered = {part.lower() for part in parts}
    # "private" bare: 'private="Set-Cookie"' makes only those fields private.
    if "private" in lowered or any(p.split("=")[0] == "no-store" for p in lowered):
        return directives
    return ", ".join(["private", *(p for p in parts if p.lower() != "public")])


def _mark_private(response: HttpResponseBase) -> None:
    current = response.get("Cache-Control")
    wanted = private_directives(current)
    if wanted != current:
        response["Cache-Control"] = wanted
        patch_vary_headers(response, ("Cookie",))


class PrivatePagesMiddleware:
    """Make every signed-in user's response ``private`` (``SIGNED_IN`` by default).

    Every signed-in page names its user and carries a CSRF token in the navigation,
    so a response without directives could be kept by a shared cache, which may
    store what it is not told otherwise about, and handed to the next visitor.
    Marking pages here covers every app's views, including those that never think
    about caching, and those that think of the anonymous visitor only. Anonymous
    responses are untouched: their public directives are the views' own.

    Place it below ``AuthenticationMiddleware``. It runs in either mode Django asks
    for; in an async chain the user is read with ``request.auser()``, which resolves
    no session when there is no session cookie.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self._acall(request)
        response: HttpResponseBase = self.get_response(request)
        if _has_session(request) and request.user.is_authenticated:
            _mark_private(response)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await self.get_response(request)
        if _has_session(request) and (await request.auser()).is_authenticated:
            _mark_private(response)
        return response


def _has_session(request: HttpRequest) -> bool:
    # Only a session signs a request in. Without its cookie nobody is, and the
    # session is left untouched: reading it would add "Vary: Cookie" to every
    # anonymous page, the public ones too.
    return settings.SESSION_COOKIE_NAME in request.COOKIES


# Form bodies Django parses into request.POST; other bodies are the view's to read.
_FORM_TYPES: Final = ("application/x-www-form-urlencoded", "multipart/form-data")


def _has_nul(request: HttpRequest) -> bool:
    if "\x00" in request.path:
        return True
    data = [request.GET]
    if request.method == "POST" and request.content_type in _FORM_TYPES:
        data.append(request.POST)
    return any(
        "\x00" in name or any("\x00" in value for value in values)
        for query in data
        for name, values in query.lists()
    )


class RefuseNulMiddleware:
    """Answer 400 to a request with a NUL byte in its path, query or form fields.

    No page of the site takes a NUL character, and PostgreSQL cannot hold one in a
    text value: a lookup with it raises DataError, which became a 500 in every
    admin list filter (``?kind=%00``) and in any view that filters on a parameter.
    Refusing it once, here, covers every view and the admin, including pages
    added later. Form fields are checked for form bodies only; a view reading a
    JSON body checks its own.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if _has_nul(request):
            # Raised, so Django answers with the site's 400 page (handler400).
            raise BadRequest("A NUL character is not valid input here.")
        return self.get_response(request)
