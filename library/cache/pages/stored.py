"""The stored form of a page, and what the first round trip decides.

A page is two keys written together: ``<key>`` holds a small JSON head (the
generation it was rendered under and the response headers, validators included)
and ``<key>:body`` the bytes. A conditional request reads only the head: when its
validator matches, the 304 goes out and the body never leaves Redis.
"""

from __future__ import annotations

import datetime
import json
import time
from datetime import UTC
from typing import Any, Final, NamedTuple, cast

from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.utils.http import parse_http_date_safe

from library.cache import http
from library.cache.pages.keys import PageLookup

# Headers not stored: per-response (Date, Content-Length) or per-visitor (cookies).
_SKIPPED: Final = frozenset({"date", "content-length", "set-cookie", "x-page-cache"})
_CSRF_FIELD: Final = b'name="csrfmiddlewaretoken"'


def body_key(key: str) -> str:
    return f"{key}:body"


# The scope entry of a request the ASGI front sends to render a stale page afresh:
# the middleware renders and stores it, whatever the tier holds.
REFRESH_SCOPE: Final = "library.page_refresh"


def refresh_key(key: str) -> str:
    """The lock one process holds while it renders a stale page afresh."""
    return f"{key}:refresh"


def stored_head(
    response: HttpResponse, generation: int, fresh_until_ms: int | None = None
) -> bytes:
    """The head; ``fresh_until_ms`` (epoch ms) for a kind kept past its freshness."""
    headers = [
        [name, value]
        for name, value in response.items()
        if name.lower() not in _SKIPPED
    ]
    fields: dict[str, Any] = {"g": generation, "h": headers}
    if fresh_until_ms is not None:
        fields["f"] = fresh_until_ms
    return json.dumps(fields, separators=(",", ":")).encode()


class _Head(NamedTuple):
    generation: int
    headers: list[list[str]]
    fresh_until_ms: int | None


def _parse_head(data: bytes) -> _Head | None:
    """Return the stored head; None for a damaged entry."""
    try:
        fields = json.loads(data)
        fresh = fields.get("f")
        return _Head(
            int(fields["g"]), fields["h"], None if fresh is None else int(fresh)
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _generation(raw: object) -> int:
    # A counter that was never bumped stands at 1 (library.cache.store).
    return 1 if raw is None else int(cast(bytes, raw))


def storable(response: HttpResponse) -> bool:
    cache_control = response.get("Cache-Control", "")
    return (
        response.status_code == 200
        and not response.streaming
        and "public" in [p.strip() for p in cache_control.split(",")]
        and not response.cookies
        and _CSRF_FIELD not in response.content
    )


# The attribute a list view sets on its response: the page number it rendered.
_RENDERED_PAGE: Final = "library_rendered_page"


def mark_rendered_page(response: HttpResponse, number: int) -> None:
    """Record which page of its list ``response`` shows.

    ``Paginator.get_page`` answers a number past the last page with the last page,
    so the number asked for and the page shown can differ; the tier reads this to
    keep such a rendering out (``shows_the_page_asked``).
    """
    setattr(response, _RENDERED_PAGE, number)


# The attribute a versioned view sets: the version it rendered (``BookVersion.token``).
_RENDERED_VERSION: Final = "library_rendered_version"


def mark_rendered_version(response: HttpResponse, token: str) -> None:
    """Record which version of its row ``response`` shows (``BookVersion.token``).

    The key names the version its record held when the request came in; the view
    reads the row itself, and a change may commit in between. Such a rendering is
    served, but never stored under a key that names another version.
    """
    setattr(response, _RENDERED_VERSION, token)


def shows_the_page_asked(lookup: PageLookup, response: HttpResponse) -> bool:
    """Return whether the response shows the page (and version) its key names.

    A rendering of another page is served but never stored: stored under the
    number asked for, every number past the end would keep its own copy of the
    last page, and a client walking ``?page=N`` could grow Redis without bound.
    A response that does not say which page it shows is taken at its key's word.
    A key that names a version keeps only a rendering marked with that version.
    """
    rendered_version = getattr(response, _RENDERED_VERSION, None)
    if lookup.version is not None and rendered_version != lookup.version:
        return False
    rendered = getattr(response, _RENDERED_PAGE, None)
    if rendered is None:
        return True
    asked = dict(lookup.query).get("page") or "1"  # "" is page 1 (keys._page_number)
    return asked == str(rendered)


def _last_modified(stored: dict[str, str]) -> datetime.datetime | None:
    seconds = parse_http_date_safe(stored.get("last-modified", ""))
    return None if seconds is None else datetime.datetime.fromtimestamp(seconds, UTC)


def _not_modified(
    request: HttpRequest, headers: list[list[str]], state: str
) -> HttpResponseNotModified | None:
    stored = {name.lower(): value for name, value in headers}
    validators = (stored.get("etag"), _last_modified(stored))
    if not http.is_not_modified(request.headers, *validators):
        return None
    answer = HttpResponseNotModified()
    for name, value in headers:
        if name.lower() in ("etag", "last-modified", "cache-control", "vary"):
            answer[name] = value
    answer["X-Page-Cache"] = state
    return answer


def full_response(
    headers: list[list[str]], body: bytes, state: str = "hit"
) -> HttpResponse:
    """The stored page; ``state`` is "hit", or "stale" past its fresh time."""
    response = HttpResponse(body)
    for name, value in headers:
        response[name] = value
    response["X-Page-Cache"] = state
    return response


def _conditional(request: HttpRequest) -> bool:
    return "If-None-Match" in request.headers or "If-Modified-Since" in request.headers


class FirstRead(NamedTuple):
    """What the first round trip decided."""

    generation: int  # current, to stamp a page stored after a miss
    answer: HttpResponse | None  # a 304 or a 200, when decided
    headers: list[list[str]] | None  # a current head whose body is still to read
    hit_bytes: int
    # The entry is past its fresh time (a kind with ``stale_s``): served as it is
    # while one process renders the page afresh.
    stale: bool = False


def first_keys(lookup: PageLookup, request: HttpRequest) -> list[str]:
    """The head, the generation, and the body unless a 304 may make it unneeded."""
    keys = [lookup.key, lookup.dependency or lookup.key]
    if not _conditional(request):
        keys.append(body_key(lookup.key))
    return keys


def first_read(
    lookup: PageLookup,
    request: HttpRequest,
    replies: list[Any],
    *,
    serve_stale: bool = False,
) -> FirstRead:
    """Decide from the first replies; a stale entry counts as a miss unless the
    caller can have it rendered afresh off the request's path (``serve_stale``)."""
    head_data, raw_generation = replies[0], replies[1]
    generation = _generation(raw_generation) if lookup.dependency else 0
    head = None if head_data is None else _parse_head(cast(bytes, head_data))
    if head is None or head.generation != generation:
        return FirstRead(generation, None, None, 0)
    fresh_until = head.fresh_until_ms
    stale = fresh_until is not None and time.time() * 1000 >= fresh_until
    if stale and not serve_stale:
        return FirstRead(generation, None, None, 0)
    state = "stale" if stale else "hit"
    size = len(cast(bytes, head_data))
    not_modified = _not_modified(request, head.headers, state)
    if not_modified is not None:
        return FirstRead(generation, not_modified, None, size, stale)
    if len(replies) == 3:
        if replies[2] is None:  # the body was evicted on its own: a miss
            return FirstRead(generation, None, None, 0)
        body = cast(bytes, replies[2])
        answer = full_response(head.headers, body, state)
        return FirstRead(generation, answer, None, size + len(body), stale)
    return FirstRead(generation, None, head.headers, size, stale)


def hit_counts(read_bytes: int, start: float, stale: bool = False) -> dict[str, int]:
    return {
        "hits": 1,
        "stale_served": int(stale),
        "hit_bytes": read_bytes,
        "cache_ms_total": round((time.perf_counter() - start) * 1000),
    }
