"""Lab-only ASGI routes in front of the HTTP app: ``/_lab/work`` and ``/_lab/wait``.

``config.asgi`` mounts ``LabRoutes`` inside load shedding (``jobs.shedding``) when
``LAB_ROUTES`` is on, which only the daphnes the load-shedding lab, its tests and the
benchmark start: ``/_lab/work`` holds a request ``ms`` milliseconds on the event loop,
at most ``LAB_WORK_CAPACITY`` at once (0: unbounded), and ``/_lab/wait`` is an exempt
long-poll stand-in. Both answer without entering Django.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from jobs.shedding import ASGIApp, Receive, Scope, Send

LAB_PATHS = ("/_lab/work", "/_lab/wait")


class LabRoutes:
    """Lab-only endpoints in front of ``app`` (mounted only when LAB_ROUTES is on)."""

    def __init__(self, app: ASGIApp, *, work_capacity: int = 0) -> None:
        self.app = app
        self._slots = asyncio.Semaphore(work_capacity) if work_capacity > 0 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path not in LAB_PATHS:
            await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode())
        try:
            ms = min(60_000, max(0, int(query.get("ms", ["300"])[0])))
        except ValueError:
            ms = 300
        if path == "/_lab/work" and self._slots is not None:
            async with self._slots:
                await asyncio.sleep(ms / 1000)
        else:
            await asyncio.sleep(ms / 1000)
        body = b"accepted\n"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/plain"),
                    (b"cache-control", b"no-store"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
