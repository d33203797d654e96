"""HTTP validators and directives: pure functions shared by the views and the lab.

``etag_for`` and ``is_not_modified`` follow RFC 9110: ``If-None-Match`` takes a list
or ``*`` and compares weakly, and ``If-Modified-Since`` is only looked at when
``If-None-Match`` is absent. ``conditional`` applies them to a rendered Django
response. The course's lab (``course/labs/http_caching/``) imports the same code.

The header syntax is Django's (``django.utils.http``): ``parse_etags`` reads the tag
list, ``quote_etag`` quotes a digest, ``http_date`` and ``parse_http_date_safe``
write and read the dates. The decision itself is not
``django.utils.cache.get_conditional_response``: that one also answers 412 to a
failed ``If-Match`` / ``If-Unmodified-Since`` (these pages ignore both), treats an
``If-None-Match`` without one well-formed tag as absent (here its presence alone
still rules out ``If-Modified-Since``), and lets ``*`` match only a response with an
ETag; it also needs an ``HttpRequest``, where the lab passes a plain header mapping.

The directives per resource kind are the HTTP Caching lesson's:

- a book: rarely changes, the same for everyone -> ``public, max-age=60``;
- a branch's stock: changes often, seconds of staleness are fine ->
  ``public, max-age=5, stale-while-revalidate=30`` (``stock_directives``: the
  max-age is the server's fresh window, ``LIBRARY_CACHE_STOCK_FRESH_S``);
- a member's own history -> ``private, max-age=30`` (never in a shared cache);
- forms and approvals -> ``no-store`` (Django's ``never_cache``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Final

from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.utils import http as django_http
from django.utils.http import parse_etags, parse_http_date_safe, quote_etag

from library.cache.reads.specs import STOCK_STALE_S

__all__ = [
    "BOOK",
    "ETAG_HEX_DIGITS",
    "HISTORY",
    "body_etag",
    "conditional",
    "etag_for",
    "http_date",
    "is_not_modified",
    "parse_entity_tags",
    "private_variant",
    "stock_directives",
    "weak_match",
]

ETAG_HEX_DIGITS = 16

# Django masks the CSRF token differently in every rendering (a BREACH defence), so
# a signed-in page is never byte-for-byte the same twice. Every masked token unmasks
# to the same secret, so the tokens are replaced before digesting and the secret
# is digested instead: equal tags mean the same page for the same CSRF secret.
_CSRF_INPUT = re.compile(rb'(name="csrfmiddlewaretoken" value=")[^"]*(")')

BOOK: Final = "public, max-age=60"


def stock_directives(fresh_s: int) -> str:
    """Return the directives of a branch's stock, fresh for ``fresh_s`` seconds.

    Stale-while-revalidate is the server's own stale window (``STOCK_STALE_S``).
    """
    return f"public, max-age={fresh_s}, stale-while-revalidate={STOCK_STALE_S:g}"


HISTORY: Final = "private, max-age=30"


def etag_for(body: str | bytes) -> str:
    """Return a strong tag: the first 16 hex digits of the body's SHA-256, quoted.

    The tag depends only on the bytes, so equal bodies get equal tags on every
    instance and any change to the content changes the tag.
    """
    data = body.encode("utf-8") if isinstance(body, str) else body
    return quote_etag(hashlib.sha256(data).hexdigest()[:ETAG_HEX_DIGITS])


def http_date(moment: datetime) -> str:
    """Return an IMF-fixdate (``Tue, 01 Jul 2025 09:00:00 GMT``), as toUTCString."""
    # Whole seconds first: a float timestamp could round 0.999999 s up to the next one.
    return django_http.http_date(moment.replace(microsecond=0).timestamp())


def weak_match(first: str, second: str) -> bool:
    """Return whether two entity-tags match weakly: equal once ``W/`` is ignored."""
    # Not Django's ``str.strip("W/")``, which strips those characters, not a prefix.
    return first.removeprefix("W/") == second.removeprefix("W/")


def parse_entity_tags(header: str) -> list[str] | None:
    """Return the tags listed in an ``If-None-Match`` value; None means ``*``.

    Django's ``parse_etags``: the list is split on commas and the malformed items
    (an unquoted tag) are dropped. A tag holding a comma (allowed by RFC 9110) is
    lost that way; this site's tags are hex digests and never hold one.
    """
    tags = parse_etags(header)
    return None if tags == ["*"] else tags


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def is_not_modified(
    request_headers: Mapping[str, str],
    etag: str | None,
    last_modified: datetime | None,
) -> bool:
    """Return whether a GET/HEAD may be answered 304 for this representation.

    1. With ``If-None-Match``: true when ``*`` is given (the resource exists) or a
       listed tag matches ``etag`` weakly. ``If-Modified-Since`` is then ignored,
       because the tag is the more precise validator.
    2. Otherwise, with ``If-Modified-Since`` and a known ``last_modified``: true when
       the resource has not changed after that date, compared in whole seconds
       (HTTP dates carry no fractions). An unparsable date is ignored.

    Header names are matched case-insensitively.
    """
    if_none_match = _header(request_headers, "If-None-Match")
    if if_none_match is not None:
        tags = parse_entity_tags(if_none_match)
        if tags is None:
            return True
        return etag is not None and any(weak_match(tag, etag) for tag in tags)
    since_text = _header(request_headers, "If-Modified-Since")
    if since_text is None or last_modified is None:
        return False
    since = parse_http_date_safe(since_text)
    if since is None:
        return False
    return int(last_modified.timestamp()) <= since


def private_variant(cache_control: str) -> str:
    """Return ``cache_control`` with ``public`` turned into ``private``.

    For the HTML page of a signed-in user: the navigation carries the user's name
    and a CSRF token, so that body must never reach a shared cache even when the
    resource kind itself is public. Freshness directives are kept for the browser.
    """
    parts = [p.strip() for p in cache_control.split(",")]
    return ", ".join("private" if p == "public" else p for p in parts)


def body_etag(request: HttpRequest, content: bytes) -> str:
    """Return the ETag of a rendered body: strong, or weak if it holds CSRF tokens.

    A body without a CSRF token gets the strong tag of its exact bytes. A body with
    one (a signed-in page's sign-out form) differs in every rendering only by the
    token's mask, so it gets a weak tag over the body with the tokens blanked plus
    the CSRF secret they stand for: a client that revalidates keeps a token that is
    still valid, and a new secret (a new sign-in) changes the tag. The secret only
    enters a SHA-256 digest cut to 64 bits; the tag cannot give it away.
    """
    stable, tokens = _CSRF_INPUT.subn(rb"\1-\2", content)
    if not tokens:
        return etag_for(content)
    secret = str(request.META.get("CSRF_COOKIE", "")).encode()
    return "W/" + etag_for(stable + b"\0" + secret)


def conditional(
    request: HttpRequest,
    response: HttpResponse,
    *,
    cache_control: str,
    last_modified: datetime | None = None,
) -> HttpResponse:
    """Add validators and directives to a rendered 200 and answer 304 when allowed.

    The ETag is strong where it can be (``body_etag``): the digest of the exact
    bytes sent, so two responses with the same tag are byte-for-byte equal; nothing
    between here and the client re-encodes the body (a compressing middleware
    would have to weaken it). Pages with a CSRF token get a weak tag. The 304
    repeats ETag, Last-Modified, Cache-Control and Vary so a cache can refresh the
    stored copy's metadata, and carries no body.
    """
    if response.status_code != 200 or request.method not in ("GET", "HEAD"):
        return response
    etag = body_etag(request, response.content)
    response["ETag"] = etag
    response["Cache-Control"] = cache_control
    if last_modified is not None:
        response["Last-Modified"] = http_date(last_modified)
    if not is_not_modified(request.headers, etag, last_modified):
        return response
    not_modified = HttpResponseNotModified()
    for name in ("ETag", "Last-Modified", "Cache-Control", "Vary"):
        if response.has_header(name):
            not_modified[name] = response[name]
    # Cookies set while rendering (a rotated CSRF cookie) still have to reach the
    # client; Django's own ConditionalGetMiddleware keeps them the same way.
    not_modified.cookies = response.cookies
    return not_modified
