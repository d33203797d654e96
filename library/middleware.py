"""Request-handling middleware of the site (the page tier has its own, in cache/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.cache import patch_vary_headers

# Revalidate on every use and keep out of shared caches; a view that wants more
# (``no-store`` for a form, a max-age for history) says so and is left alone.
SIGNED_IN: Final = "private, no-cache"


def _mark_private(response: HttpResponseBase) -> None:
    response["Cache-Control"] = SIGNED_IN
    patch_vary_headers(response, ("Cookie",))


class PrivatePagesMiddleware:
    """Give a signed-in user's response ``Cache-Control: private`` unless it has one.

    Every signed-in page names its user and carries a CSRF token in the navigation,
    so a response without directives could be kept by a shared cache, which may
    store what it is not told otherwise about, and handed to the next visitor.
    Marking pages here covers every app's views, including those that never think
    about caching. Anonymous responses are untouched: their public directives are
    the views' own.

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
        if not response.has_header("Cache-Control") and request.user.is_authenticated:
            _mark_private(response)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await self.get_response(request)
        if not response.has_header("Cache-Control"):
            user = await request.auser()
            if user.is_authenticated:
                _mark_private(response)
        return response
