"""The Django middleware: serve stored anonymous pages, store new ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import redis
from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse

from library.cache.metrics import (
    cache_redis,
    metrics_buffer,
    metrics_flush,
    metrics_record,
    redis_failed,
    redis_usable,
)
from library.cache.pages.keys import PAGE, PageLookup, may_be_page, page_key
from library.cache.pages.stored import (
    REFRESH_SCOPE,
    body_key,
    first_keys,
    first_read,
    full_response,
    hit_counts,
    refresh_key,
    shows_the_page_asked,
    storable,
    stored_head,
)
from library.cache.store import cache_enabled
from library.cache.ttl import lifetime_with_jitter


class PageCacheMiddleware:
    """Serve stored anonymous pages before the rest of the stack; store new ones.

    A Redis failure never fails a request: the lookup is skipped and the view runs
    (the cache's usual rule, see ``library.cache.store``).

    It runs in either mode Django asks for. In an async chain (every middleware
    async-capable, see ``config.static``), a request for a route the tier does not
    cover passes straight through with no thread; a page route does its lookup and
    store (sync Redis, and the database for a book's version) in a thread.
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
        found = self._read(request)
        if found is None:
            return self.get_response(request)
        lookup, generation, answer = found
        if answer is not None:
            return answer
        response = self.get_response(request)
        self._store(lookup, generation, response)
        response["X-Page-Cache"] = "miss"
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if not cache_enabled() or not may_be_page(request):
            response: HttpResponse = await self.get_response(request)
            return response
        found = await sync_to_async(self._read)(request)
        if found is None:
            passed: HttpResponse = await self.get_response(request)
            return passed
        lookup, generation, answer = found
        if answer is not None:
            return answer
        rendered: HttpResponse = await self.get_response(request)
        await sync_to_async(self._store)(lookup, generation, rendered)
        rendered["X-Page-Cache"] = "miss"
        return rendered

    def _read(
        self, request: HttpRequest
    ) -> tuple[PageLookup, int, HttpResponse | None] | None:
        """Return the lookup, the current generation and the stored answer if any;
        None when the tier must stay out (not a page, no Redis)."""
        if not cache_enabled() or not redis_usable():
            return None
        lookup = page_key(request)
        if lookup is None:
            return None
        start = time.perf_counter()
        try:
            # The head, the generation it depends on (and the body), in one trip.
            replies = cache_redis().mget(first_keys(lookup, request))
            read = first_read(lookup, request, replies)
            answer, read_bytes = read.answer, read.hit_bytes
            if read.headers is not None:  # validators did not match: the body too
                body = cache_redis().get(body_key(lookup.key))
                if body is not None:
                    answer = full_response(read.headers, cast(bytes, body))
                    read_bytes += len(cast(bytes, body))
        except redis.RedisError as error:
            redis_failed(error, namespace=PAGE.namespace, during="page read")
            return None
        if _refreshing(request):
            return lookup, read.generation, None  # sent to be rendered afresh
        if answer is not None and metrics_buffer(
            PAGE.namespace, **hit_counts(read_bytes, start)
        ):
            metrics_flush()
        return lookup, read.generation, answer

    def _store(
        self, lookup: PageLookup, generation: int, response: HttpResponse
    ) -> None:
        """Keep the page, stamped with the generation read before the view ran.

        Stamping the earlier reading is what makes a race harmless: if a bump lands
        while the view renders, the page is stored under the old generation and the
        next reader, seeing the new one, treats it as a miss.
        """
        if not lookup.storable or not storable(response):
            return
        if not shows_the_page_asked(lookup, response):
            return
        kind = lookup.kind
        lifetime_ms = (
            lifetime_with_jitter(lookup.key, kind.lifetime_s, kind.jitter_s) * 1000
        )
        fresh_until_ms = None
        kept_ms = lifetime_ms
        if kind.stale_s:
            fresh_until_ms = int(time.time() * 1000) + lifetime_ms
            kept_ms += kind.stale_s * 1000
        head = stored_head(response, generation, fresh_until_ms)
        try:
            pipe = cache_redis().pipeline(transaction=True)
            pipe.set(lookup.key, head, px=kept_ms)
            pipe.set(body_key(lookup.key), response.content, px=kept_ms)
            if kind.stale_s:
                pipe.delete(refresh_key(lookup.key))
            pipe.execute()
        except redis.RedisError as error:
            redis_failed(error, namespace=PAGE.namespace, during="page store")
            return
        size = len(head) + len(response.content)
        metrics_record(PAGE.namespace, misses=1, miss_bytes=size, sets=1)


def _refreshing(request: HttpRequest) -> bool:
    """Whether the ASGI front sent this request to render a stale page afresh."""
    scope = getattr(request, "scope", None)
    return bool(scope and scope.get(REFRESH_SCOPE))
