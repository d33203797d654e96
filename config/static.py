"""Static files through WhiteNoise, in a middleware chain that can stay async.

WhiteNoise 6 declares its middleware sync-only. One sync-only middleware makes
Django run every middleware above it, and the view's wait with them, inside a
worker thread for the whole request: a long poll or a server-sent-event stream then
holds a thread for its life. Serving a static file is a dictionary lookup (a stat
with autorefresh, in DEBUG) and building a file response, so the async path does
that inline and otherwise awaits the rest of the stack.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware  # type: ignore[import-untyped]


class StaticFilesMiddleware(WhiteNoiseMiddleware):  # type: ignore[misc]
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[..., Any] | None = None) -> None:
        super().__init__(get_response)
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(
        self, request: HttpRequest
    ) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.async_mode:
            return self._acall(request)
        response: HttpResponseBase = super().__call__(request)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if self.autorefresh:
            static_file = self.find_file(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            served: HttpResponseBase = self.serve(static_file, request)
            return served
        response: HttpResponseBase = await self.get_response(request)
        return response
