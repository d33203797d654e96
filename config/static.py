"""Static files through WhiteNoise, in a middleware chain that can stay async.

WhiteNoise 6 declares its middleware sync-only. One sync-only middleware makes
Django run every middleware above it, and the view's wait with them, inside a
worker thread for the whole request: a long poll or a server-sent-event stream then
holds a thread for its life. Serving a static file is a dictionary lookup (a stat
with autorefresh, in DEBUG) and building a file response, so the async path does
that inline and otherwise awaits the rest of the stack.

The file's body goes out through an async iterator, each block read in a thread:
given WhiteNoise's sync iterator, Django's ASGI handler would read the whole file
into a list in a thread first, and warn about it on every process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import IO, Any, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import FileResponse, HttpRequest, HttpResponseBase
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
            if isinstance(served, FileResponse) and not served.is_async:
                served.streaming_content = _async_body(served)
            return served
        response: HttpResponseBase = await self.get_response(request)
        return response


def _async_body(response: FileResponse) -> AsyncIterator[bytes]:
    """Return the response's body as an async iterator (it was a sync one)."""
    file = response.file_to_stream
    if file is not None:
        return _blocks(file, response.block_size)
    # A HEAD: WhiteNoise's response has no file, only an empty sync body.
    return _parts(cast(Iterable[bytes], response.streaming_content))


async def _blocks(file: IO[bytes], size: int) -> AsyncIterator[bytes]:
    """Yield the file's blocks, each read in a thread off the event loop.

    Closed here once read: the response closes it too, but only if the server gets
    to closing the response (a client gone at the last block may stop it first).
    """
    read = sync_to_async(file.read, thread_sensitive=False)
    try:
        while block := await read(size):
            yield block
    finally:
        file.close()


async def _parts(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    """Yield a body already in memory."""
    for part in parts:
        yield part
