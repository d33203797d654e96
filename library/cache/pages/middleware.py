"""The Django middleware: serve stored anonymous pages, store new ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

import redis
import redis.asyncio
from django.http import HttpRequest, HttpResponse

from library.cache.metrics import (
    cache_redis,
    metrics_buffer,
    metrics_flush,
    metrics_record,
    redis_failed,
    redis_usable,
)
from library.cache.pages.keys import PAGE, PageLookup, page_key
from library.cache.pages.stored import (
    _body_key,
    _first_keys,
    _first_read,
    _full,
    _head,
    _hit_counts,
    _storable,
)
from library.cache.store import cache_enabled
from library.cache.ttl import lifetime_with_jitter


class PageCacheMiddleware:
    """Serve stored anonymous pages before the rest of the stack; store new ones.

    A Redis failure never fails a request: the lookup is skipped and the view runs
    (the cache's usual rule, see ``library.cache.store``).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not cache_enabled() or not redis_usable():
            return self.get_response(request)
        lookup = page_key(request)
        if lookup is None:
            return self.get_response(request)
        start = time.perf_counter()
        try:
            # The head, the generation it depends on (and the body), in one trip.
            replies = cache_redis().mget(_first_keys(lookup, request))
            read = _first_read(lookup, request, replies)
            answer, read_bytes = read.answer, read.hit_bytes
            if read.headers is not None:  # validators did not match: the body too
                body = cache_redis().get(_body_key(lookup.key))
                if body is not None:
                    answer = _full(read.headers, cast(bytes, body))
                    read_bytes += len(cast(bytes, body))
        except redis.RedisError as error:
            redis_failed(error, namespace=PAGE.namespace, during="page read")
            return self.get_response(request)
        if answer is not None:
            if metrics_buffer(PAGE.namespace, **_hit_counts(read_bytes, start)):
                metrics_flush()
            return answer
        response = self.get_response(request)
        self._store(lookup, read.generation, response)
        response["X-Page-Cache"] = "miss"
        return response

    def _store(
        self, lookup: PageLookup, generation: int, response: HttpResponse
    ) -> None:
        """Keep the page, stamped with the generation read before the view ran.

        Stamping the earlier reading is what makes a race harmless: if a bump lands
        while the view renders, the page is stored under the old generation and the
        next reader, seeing the new one, treats it as a miss.
        """
        if not _storable(response):
            return
        head = _head(response, generation)
        kind = lookup.kind
        lifetime_ms = (
            lifetime_with_jitter(lookup.key, kind.lifetime_s, kind.jitter_s) * 1000
        )
        try:
            pipe = cache_redis().pipeline(transaction=True)
            pipe.set(lookup.key, head, px=lifetime_ms)
            pipe.set(_body_key(lookup.key), response.content, px=lifetime_ms)
            pipe.execute()
        except redis.RedisError as error:
            redis_failed(error, namespace=PAGE.namespace, during="page store")
            return
        size = len(head) + len(response.content)
        metrics_record(PAGE.namespace, misses=1, miss_bytes=size, sets=1)
