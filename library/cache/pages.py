"""The page tier: whole anonymous responses kept in Redis, served before the view runs.

The data tier (``library.cache.reads``) saves the origin's queries, but a request that
hits it still crosses the session, CSRF, auth and message middleware, runs the view
and renders the template: most of a request's time on this stack. The page tier keeps
the finished response of the public pages, so a hit costs a URL match, one or two
Redis reads and a copy of the bytes. It sits in the middleware list right after
WhiteNoise, so the security headers are still added on the way out.

Only what a shared cache may hold goes in, and only for visitors who share it:

- the request is a GET with no session and no messages cookie (a signed-in page names
  its user and carries a CSRF token; a flash message is one person's);
- the response is a 200 with ``public`` in its Cache-Control, sets no cookie and
  holds no CSRF token (checked on the bytes, so a template change cannot slip one in);
- the route is listed in ``PAGES`` below, with a key built by the key generator: the
  branch is the tenant, and the full path and query are the criteria, because the
  body echoes them (search box, pagination links). What retires the page is either
  in the key (a book page names the book's version) or stamped in the entry: a
  catalogue page records the branch's list or search generation it was rendered
  under, and the lookup reads the page and the current generation in one MGET, so
  a hit costs one Redis round trip and a bumped generation turns it into a miss.

A hit answers 304 by itself when the client's ``If-None-Match`` matches the stored
ETag: validators are checked before any body is touched. The stored headers are the
view's own (ETag, Last-Modified, Cache-Control, Vary, X-Frame-Options, ...), so a
hit and a miss are indistinguishable to the client apart from ``X-Page-Cache``.

Page lifetimes never exceed their data's (list pages: seconds to minutes), and the
hottest page kind (a branch's first catalogue page) is split into ``HOT_COPIES``
copies, each a key of its own, read at random, so one key's traffic is spread the
way a cluster spreads it over shards.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Final, NamedTuple, cast

import redis
import redis.asyncio
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.urls import Resolver404, resolve
from django.utils.http import parse_http_date_safe

from library.cache import http, reads
from library.cache.keys import KeySpec
from library.cache.metrics import (
    cache_redis,
    metrics_buffer,
    metrics_flush,
    metrics_record,
    redis_failed,
    redis_usable,
)
from library.cache.reads import LIST, SEARCH
from library.cache.store import cache_enabled, generation_key
from library.cache.ttl import lifetime_with_jitter
from library.models import Book

__all__ = [
    "HOT_COPIES",
    "PAGE",
    "PAGES",
    "PageCacheMiddleware",
    "PageTierASGI",
    "page_key",
]

log = logging.getLogger(__name__)

PAGE: Final = KeySpec(namespace="page", operation="http", schema_version=3)
HOT_COPIES: Final = 4
# Headers not stored: per-response (Date, Content-Length) or per-visitor (cookies).
_SKIPPED: Final = frozenset({"date", "content-length", "set-cookie", "x-page-cache"})
_CSRF_FIELD: Final = b'name="csrfmiddlewaretoken"'
_rng = random.Random()


@dataclass(frozen=True)
class PageKind:
    """How one route's anonymous page is keyed and how long it lives."""

    # (request, view kwargs) -> (key, dependency), or None when the page cannot be
    # keyed (no such row). The dependency is the Redis key of a generation counter
    # the page was rendered under, or None when the key itself names the version.
    key: Callable[[HttpRequest, dict[str, Any]], tuple[str, str | None] | None]
    lifetime_s: int
    jitter_s: int
    copies: Callable[[HttpRequest], int] = lambda request: 1
    # The key reads the database: only the Django middleware may look it up (the
    # ASGI front runs on the event loop, where database calls are not allowed).
    needs_database: bool = False


def _full_path(request: HttpRequest) -> str:
    return request.get_full_path()


def _catalogue_key(
    request: HttpRequest, kwargs: dict[str, Any]
) -> tuple[str, str | None]:
    tenant = reads.branch_tenant(int(kwargs["branch_id"]))
    spec = SEARCH if request.GET.get("q") else LIST
    key = PAGE.key(
        tenant=tenant, criteria={"view": "branch-books", "path": _full_path(request)}
    )
    return key, generation_key(spec.namespace, tenant)


def _stock_list_key(
    request: HttpRequest, kwargs: dict[str, Any]
) -> tuple[str, str | None]:
    tenant = reads.branch_tenant(int(kwargs["branch_id"]))
    key = PAGE.key(
        tenant=tenant, criteria={"view": "branch-stock", "path": _full_path(request)}
    )
    return key, generation_key(LIST.namespace, tenant)


def _book_key(
    request: HttpRequest, kwargs: dict[str, Any]
) -> tuple[str, str | None] | None:
    # The version is read from the database, as the data tier does: it is bumped in
    # the change's own transaction, so the key can never name an older page.
    current = (
        Book.objects.filter(pk=int(kwargs["book_id"]))
        .values_list("branch_id", "version", "updated_at")
        .first()
    )
    if current is None:
        return None
    branch_id, version, updated_at = current
    key = PAGE.key(
        tenant=reads.branch_tenant(branch_id),
        criteria={
            "view": "book-detail",
            "v": version,
            "u": int(updated_at.timestamp() * 1_000_000),
            "path": _full_path(request),
        },
    )
    return key, None


def _first_catalogue_page(request: HttpRequest) -> int:
    # Every visitor of a branch lands on its first, unsearched page: the hot key.
    plain = not request.GET or (
        set(request.GET) == {"page"} and request.GET["page"] == "1"
    )
    return HOT_COPIES if plain else 1


PAGES: Final[dict[str, PageKind]] = {
    "branch-books": PageKind(
        key=_catalogue_key, lifetime_s=60, jitter_s=15, copies=_first_catalogue_page
    ),
    "branch-stock": PageKind(key=_stock_list_key, lifetime_s=60, jitter_s=15),
    "book-detail": PageKind(
        key=_book_key, lifetime_s=600, jitter_s=120, needs_database=True
    ),
}


class PageLookup(NamedTuple):
    key: str
    kind: PageKind
    dependency: str | None


def page_key(request: HttpRequest, *, no_database: bool = False) -> PageLookup | None:
    """Return where the page tier keeps this request's page, or None: do not use it.

    Anything the rest of the stack must see first is left to it: a plain-HTTP
    request that the security middleware will redirect, a Host that is not
    allowed (Django answers 400), a session or a flash message.
    """
    if request.method != "GET":
        return None
    if settings.SECURE_SSL_REDIRECT and not request.is_secure():
        return None
    try:
        request.get_host()
    except DisallowedHost:
        return None
    cookies = request.COOKIES
    if settings.SESSION_COOKIE_NAME in cookies or "messages" in cookies:
        return None
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return None
    kind = PAGES.get(match.url_name or "")
    if kind is None or (no_database and kind.needs_database):
        return None
    keyed = kind.key(request, match.kwargs)
    if keyed is None:
        return None
    key, dependency = keyed
    copies = kind.copies(request)
    if copies > 1:
        key = f"{key}#c{_rng.randrange(copies)}"
    return PageLookup(key, kind, dependency)


# --- the stored form ---------------------------------------------------------------
#
# A page is two keys written together: ``<key>`` holds a small JSON head (the
# generation it was rendered under and the response headers, validators included)
# and ``<key>:body`` the bytes. A conditional request reads only the head: when its
# validator matches, the 304 goes out and the body never leaves Redis.


def _body_key(key: str) -> str:
    return f"{key}:body"


def _head(response: HttpResponse, generation: int) -> bytes:
    headers = [
        [name, value]
        for name, value in response.items()
        if name.lower() not in _SKIPPED
    ]
    return json.dumps({"g": generation, "h": headers}, separators=(",", ":")).encode()


def _parse_head(data: bytes) -> tuple[int, list[list[str]]] | None:
    """Return the stored generation and headers; None for a damaged entry."""
    try:
        fields = json.loads(data)
        return int(fields["g"]), fields["h"]
    except (ValueError, KeyError, TypeError):
        return None


def _generation(raw: object) -> int:
    # A counter that was never bumped stands at 1 (library.cache.store).
    return 1 if raw is None else int(cast(bytes, raw))


def _storable(response: HttpResponse) -> bool:
    cache_control = response.get("Cache-Control", "")
    return (
        response.status_code == 200
        and not response.streaming
        and "public" in [p.strip() for p in cache_control.split(",")]
        and not response.cookies
        and _CSRF_FIELD not in response.content
    )


def _last_modified(stored: dict[str, str]) -> datetime.datetime | None:
    seconds = parse_http_date_safe(stored.get("last-modified", ""))
    return None if seconds is None else datetime.datetime.fromtimestamp(seconds, UTC)


def _not_modified(
    request: HttpRequest, headers: list[list[str]]
) -> HttpResponseNotModified | None:
    stored = {name.lower(): value for name, value in headers}
    validators = (stored.get("etag"), _last_modified(stored))
    if not http.is_not_modified(request.headers, *validators):
        return None
    answer = HttpResponseNotModified()
    for name, value in headers:
        if name.lower() in ("etag", "last-modified", "cache-control", "vary"):
            answer[name] = value
    answer["X-Page-Cache"] = "hit"
    return answer


def _full(headers: list[list[str]], body: bytes) -> HttpResponse:
    response = HttpResponse(body)
    for name, value in headers:
        response[name] = value
    response["X-Page-Cache"] = "hit"
    return response


def _conditional(request: HttpRequest) -> bool:
    return "If-None-Match" in request.headers or "If-Modified-Since" in request.headers


class _Read(NamedTuple):
    """What the first round trip decided."""

    generation: int  # current, to stamp a page stored after a miss
    answer: HttpResponse | None  # a 304 or a 200, when decided
    headers: list[list[str]] | None  # a current head whose body is still to read
    hit_bytes: int


def _first_keys(lookup: PageLookup, request: HttpRequest) -> list[str]:
    """The head, the generation, and the body unless a 304 may make it unneeded."""
    keys = [lookup.key, lookup.dependency or lookup.key]
    if not _conditional(request):
        keys.append(_body_key(lookup.key))
    return keys


def _first_read(lookup: PageLookup, request: HttpRequest, replies: list[Any]) -> _Read:
    head_data, raw_generation = replies[0], replies[1]
    generation = _generation(raw_generation) if lookup.dependency else 0
    head = None if head_data is None else _parse_head(cast(bytes, head_data))
    if head is None or head[0] != generation:
        return _Read(generation, None, None, 0)
    headers = head[1]
    size = len(cast(bytes, head_data))
    not_modified = _not_modified(request, headers)
    if not_modified is not None:
        return _Read(generation, not_modified, None, size)
    if len(replies) == 3:
        if replies[2] is None:  # the body was evicted on its own: a miss
            return _Read(generation, None, None, 0)
        body = cast(bytes, replies[2])
        return _Read(generation, _full(headers, body), None, size + len(body))
    return _Read(generation, None, headers, size)


def _hit_counts(read_bytes: int, start: float) -> dict[str, int]:
    return {
        "hits": 1,
        "hit_bytes": read_bytes,
        "cache_ms_total": round((time.perf_counter() - start) * 1000),
    }


# --- the middleware ----------------------------------------------------------------


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


# --- the ASGI front -------------------------------------------------------------------


class PageTierASGI:
    """Answer stored pages on the event loop, before Django's handler is entered.

    The same entries as ``PageCacheMiddleware`` (which stores them, with every
    header the stack adds), for the kinds whose key needs no database: one async
    MGET and the bytes go out, with no request thread, no signals, no middleware.
    Anything else, and every miss, goes to Django unchanged.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._clients: dict[int, Any] = {}

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
            client = redis.asyncio.Redis.from_url(
                settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=1.0
            )
            self._clients[id(loop)] = client
        return client

    async def _answered(self, scope: Any, send: Any) -> bool:
        if not redis_usable():
            return False
        request = ASGIRequest(scope, io.BytesIO())
        lookup = page_key(request, no_database=True)
        if lookup is None:
            return False
        start = time.perf_counter()
        client = self._client()
        try:
            replies = await client.mget(_first_keys(lookup, request))
            read = _first_read(lookup, request, replies)
            answer, read_bytes = read.answer, read.hit_bytes
            if read.headers is not None:
                body = await client.get(_body_key(lookup.key))
                if body is not None:
                    answer = _full(read.headers, cast(bytes, body))
                    read_bytes += len(cast(bytes, body))
        except redis.RedisError as error:
            redis_failed(error, namespace=PAGE.namespace, during="page read")
            return False
        if answer is None:
            return False  # Django renders it, and the middleware stores it
        if metrics_buffer(PAGE.namespace, **_hit_counts(read_bytes, start)):
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
