"""The anonymous lesson page: rendered once per process, served with its own tokens.

A lesson page is the same for every visitor who has no session: its text comes from
files, its lab's controls from the lab's definition, and nothing on it is theirs
(no progress, no runs, no challenge answers: those live in the session). Rendering
it costs tens of milliseconds of template work (the text, the lab form, the
diagrams' markup), so that variant is rendered once per process and host and kept
here, in memory, for ``LIFETIME_S``: lesson files change with a deploy, which
restarts the process anyway.

What is not the same for everyone is the CSRF token of the page's two forms (the
lab run and "mark as read"). The stored page holds a placeholder where the tokens
go; each answer replaces it with ``get_token(request)``, which also has the CSRF
middleware set the visitor's cookie, exactly as a rendered page would.

The ASGI front (``course.lesson_front``) answers the same variant before Django is
entered, from the same stored page.

Only that variant is kept: a GET with no query string (``?job=`` shows a run), no
session cookie, no flash message, of a visitor who is not signed in, and only while
the cache is on (``LIBRARY_CACHE``). Anything else renders as before.

Compression (``gzip_with_token``): this variant's HTML leaves gzipped when the
client accepts it, compressed once in pieces around its tokens, with random bytes in
the gzip header as Django's ``GZipMiddleware`` adds them (its BREACH mitigation).
Only this variant: it holds no secret apart from the CSRF token, which Django masks
afresh on every response. Pages of a signed-in user, which show their name and data
beside text an attacker may reflect, stay uncompressed.
"""

from __future__ import annotations

import functools
import re
import secrets
import struct
import threading
import time
import zlib
from collections.abc import Callable
from typing import Final

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.utils.cache import patch_vary_headers

from library.cache.store import cache_enabled

LIFETIME_S: Final = 300
MAX_PAGES: Final = 256  # lessons x hosts; far more than the course has
# Where the CSRF tokens go: random per process, so no lesson text can contain it.
PLACEHOLDER: Final = f"csrf-placeholder-{secrets.token_hex(12)}"

# Marks a response that is the shared variant, so the ASGI front
# (``course.lesson_front``) knows whose headers to keep.
SHARED_HEADER: Final = "X-Lesson-Cache"

Key = tuple[str, str]  # (slug, the site's address)
Headers = list[tuple[str, str]]

# key -> (expiry on the monotonic clock, HTML with placeholders, the headers the
# whole stack sent with it, once the front has seen them)
_pages: dict[Key, tuple[float, str, Headers | None]] = {}
_lock = threading.Lock()


def shared_key(request: HttpRequest, slug: str) -> Key | None:
    """Return the key of the page every visitor like this one shares, or None."""
    if request.method != "GET" or request.META.get("QUERY_STRING"):
        return None
    cookies = request.COOKIES
    if settings.SESSION_COOKIE_NAME in cookies or "messages" in cookies:
        return None
    if request.user.is_authenticated or not cache_enabled():
        return None
    # The text names the site's own address ({{site}}), so the host is in the key.
    return slug, request.build_absolute_uri("/")


def _stored(key: Key) -> str | None:
    with _lock:
        found = _pages.get(key)
    if found is None or found[0] < time.monotonic():
        return None
    return found[1]


def _store(key: Key, html: str) -> None:
    with _lock:
        if len(_pages) >= MAX_PAGES:
            _pages.clear()  # a flood of hosts: start again rather than grow
        _pages[key] = (time.monotonic() + LIFETIME_S, html, None)


def shared_stored(key: Key) -> tuple[str, Headers] | None:
    """Return the stored page and its headers, once both are known."""
    with _lock:
        found = _pages.get(key)
    if found is None or found[0] < time.monotonic() or found[2] is None:
        return None
    return found[1], found[2]


def headers_store(key: Key, headers: Headers) -> None:
    """Keep the headers the stack sent with the stored page (the ASGI front's)."""
    with _lock:
        found = _pages.get(key)
        if found is not None and found[2] is None:
            _pages[key] = (found[0], found[1], headers)


def shared_page(
    request: HttpRequest, key: Key, render: Callable[[str], HttpResponse]
) -> HttpResponse:
    """Answer with the stored page (rendered by ``render(PLACEHOLDER)`` if none),
    carrying this request's CSRF token."""
    html = _stored(key)
    if html is None:
        rendered = render(PLACEHOLDER)
        if rendered.status_code != 200 or rendered.cookies:
            return rendered  # not the shared page: answered, never kept
        html = rendered.content.decode()
        _store(key, html)
    response = shared_response(request, html, get_token(request))
    response[SHARED_HEADER] = "view"
    return response


def shared_response(request: HttpRequest, html: str, token: str) -> HttpResponse:
    """Return the stored page with ``token`` in place, gzipped if the client accepts
    it (see the module doc for which pages)."""
    response = HttpResponse()
    patch_vary_headers(response, ("Accept-Encoding",))
    if _ACCEPTS_GZIP.search(request.META.get("HTTP_ACCEPT_ENCODING", "")) is None:
        response.content = html.replace(PLACEHOLDER, token)
        return response
    response.content = gzip_with_token(html, token)
    response["Content-Encoding"] = "gzip"
    return response


# As Django's GZipMiddleware reads Accept-Encoding.
_ACCEPTS_GZIP: Final = re.compile(r"\bgzip\b")
# As Django's compress_string: up to this many random bytes in the gzip header, so
# the length of an answer says less about its content (BREACH).
_MAX_RANDOM_BYTES: Final = 100
_FULL_FLUSH_LEVEL: Final = 6


def _deflated(data: bytes) -> bytes:
    # Raw deflate ending in a full flush: byte-aligned, no final block, and no
    # back-reference into what precedes it, so such pieces can be concatenated.
    packer = zlib.compressobj(_FULL_FLUSH_LEVEL, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush(zlib.Z_FULL_FLUSH)


@functools.lru_cache(maxsize=MAX_PAGES)
def _packed(html: str) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """The page's pieces around the placeholders, raw and deflated (once per page)."""
    parts = tuple(part.encode() for part in html.split(PLACEHOLDER))
    return parts, tuple(_deflated(part) for part in parts)


def gzip_with_token(html: str, token: str) -> bytes:
    """Return the page with ``token`` in place, gzipped.

    The page is compressed once, in pieces around its placeholders; an answer
    compresses only its token (a few dozen bytes) and joins the pieces: gzipping
    the whole 90 KB page on every request cost more than the rest of the answer.
    The header carries random bytes in its file name field, as Django's
    ``compress_string`` does against BREACH.
    """
    parts, deflated = _packed(html)
    raw_token = token.encode()
    packed_token = _deflated(raw_token)
    body = [deflated[0]]
    crc = zlib.crc32(parts[0])
    for part, packed in zip(parts[1:], deflated[1:], strict=True):
        body += [packed_token, packed]
        crc = zlib.crc32(part, zlib.crc32(raw_token, crc))
    size = sum(map(len, parts)) + len(raw_token) * (len(parts) - 1)
    name = secrets.token_hex(secrets.randbelow(_MAX_RANDOM_BYTES // 2 + 1)).encode()
    header = b"\x1f\x8b\x08\x08" + b"\x00\x00\x00\x00" + b"\x00\xff" + name + b"\x00"
    final_block = b"\x03\x00"  # an empty final block ends the deflate stream
    trailer = struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)
    return b"".join([header, *body, final_block, trailer])


def shared_pages_clear() -> None:
    """Forget every stored page (tests, or a lesson file edited in place)."""
    with _lock:
        _pages.clear()
    _packed.cache_clear()
