"""The ASGI front: answer stored pages on the event loop, before Django."""

from __future__ import annotations

import asyncio
import io
import logging
import time
from typing import Any, cast

import redis
import redis.asyncio
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest

from config.redis_async import async_redis
from library.cache.metrics import (
    metrics_buffer,
    metrics_flush,
    redis_failed,
    redis_usable,
)
from library.cache.pages.keys import PAGE, page_route, route_lookup
from library.cache.pages.stored import (
    REFRESH_SCOPE,
    body_key,
    first_keys,
    first_read,
    full_response,
    hit_counts,
    refresh_key,
)
from library.cache.store import cache_enabled

logger = logging.getLogger(__name__)

# How long one process may hold a stale page's refresh before another may try: a
# render that crashed or hung must not keep the stale copy for its whole window.
REFRESH_LEASE_MS = 10_000
# Request headers the background render does not carry: no visitor's cookies, and
# no validators (it must render the page, not answer 304).
_NOT_FORWARDED = frozenset({b"cookie", b"if-none-match", b"if-modified-since"})


class PageTierASGI:
    """Answer stored pages on the event loop, before Django's handler is entered.

    The same entries as ``PageCacheMiddleware`` (which stores them, with every
    header the stack adds): one async MGET (after one GET of the version record,
    for a book page) and the bytes go out, with no request thread, no signals, no
    middleware, no database. Anything else, and every miss, goes to Django
    unchanged.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._clients: dict[int, Any] = {}
        # The background renders under way (the loop keeps only weak references).
        self._renders: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        candidate = scope["type"] == "http" and scope["method"] == "GET"
        if candidate and cache_enabled() and await self._answered(scope, send):
            return
        await self.app(scope, receive, send)

    def _client(self) -> Any:
        # One asyncio client per event loop: a client is bound to the loop it
        # first ran on.
        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None:
            client = async_redis(
                settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=1.0
            )
            self._clients[id(loop)] = client
        return client

    async def _answered(self, scope: Any, send: Any) -> bool:
        if not redis_usable():
            return False
        request = ASGIRequest(scope, io.BytesIO())
        route = page_route(request)
        if route is None:
            return False
        start = time.perf_counter()
        client = self._client()
        try:
            record = None
            if route.kind.record is not None:
                # The version the key names: one GET. No record (never written,
                # expired, evicted): Django loads it from the database.
                raw = await client.get(route.kind.record.key(route.kwargs))
                record = route.kind.record.parse(raw)
                if record is None:
                    return False
            lookup = route_lookup(route, record)
            if lookup is None:
                return False
            replies = await client.mget(first_keys(lookup, request))
            read = first_read(lookup, request, replies, serve_stale=True)
            answer, read_bytes = read.answer, read.hit_bytes
            if read.headers is not None:
                body = await client.get(body_key(lookup.key))
                if body is not None:
                    state = "stale" if read.stale else "hit"
                    answer = full_response(read.headers, cast(bytes, body), state)
                    read_bytes += len(cast(bytes, body))
            if answer is not None and read.stale:
                await self._render_afresh(client, lookup.key, scope)
        except redis.RedisError as error:
            redis_failed(error, namespace=PAGE.namespace, during="page read")
            return False
        if answer is None:
            return False  # Django renders it, and the middleware stores it
        counts = hit_counts(read_bytes, start, read.stale)
        if metrics_buffer(PAGE.namespace, **counts):
            await asyncio.to_thread(metrics_flush)
        headers = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in answer.items()
        ]
        headers.append((b"content-length", str(len(answer.content)).encode()))
        await send(
            {
                "type": "http.response.start",
                "status": answer.status_code,
                "headers": headers,
            }
        )
        await send({"type": "http.response.body", "body": answer.content})
        return True

    async def _render_afresh(self, client: Any, key: str, scope: Any) -> None:
        """Have Django render a stale page again, once across every process.

        The first process to take the lease starts the render in the background; the
        middleware stores the page (and frees the lease), and until then every
        visitor, this one included, gets the stale copy at a hit's cost.
        """
        taken = await client.set(refresh_key(key), b"1", nx=True, px=REFRESH_LEASE_MS)
        if not taken:
            return
        headers = [(n, v) for n, v in scope["headers"] if n not in _NOT_FORWARDED]
        fresh_scope = {**scope, "headers": headers, REFRESH_SCOPE: True}
        task = asyncio.create_task(self._render(fresh_scope))
        self._renders.add(task)
        task.add_done_callback(self._renders.discard)

    async def _render(self, scope: Any) -> None:
        answered = asyncio.Event()
        asked = False

        async def receive() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await answered.wait()  # nobody hangs up on a background render
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered.set()

        try:
            await self.app(scope, receive, send)
        except Exception:  # the stale copy stays; the lease lets another try
            logger.exception("rendering %s afresh failed", scope.get("path"))
