"""Lab for "HTTP Caching": validators, conditional requests and directives.

Model part. The lesson starts a small HTTP server for four library endpoints and
probes it with curl; here the same server is an in-process function from (method,
path, request headers) to (status, headers, body), and the probe calls it in the
lesson's order:

1. a plain GET of ``/book/7`` — the validators (ETag, Last-Modified) it carries;
2. the same GET unconditionally, with ``If-None-Match`` and with
   ``If-Modified-Since`` — 200 with the body, then 304 with no body;
3. a POST changes the book; the old tag no longer matches, so the body comes back;
4. the ``Cache-Control`` each endpoint sends.

``downloaded_bytes`` is what curl counts: the UTF-8 length of the body, which is
``JSON.stringify`` text without spaces, and 0 for a 304. Nothing here depends on the
network, so a socket would add only run time.

The validator functions (``etag_for``, ``is_not_modified`` and their helpers) are
pure and follow RFC 9110 rather than the lesson's shortcut: ``If-None-Match`` takes a
list or ``*`` and compares weakly, and ``If-Modified-Since`` is only looked at when
``If-None-Match`` is absent. For every request the lesson makes both rules agree.
They are meant to move into ``library/cache/http.py`` unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime

from django.utils.http import parse_http_date_safe

from course.labs.base import Cell, Chart, Lab, Params, Progress, Tables, table

# --- validators (pure) ----------------------------------------------------------

ETAG_HEX_DIGITS = 16
# entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE; etagc excludes DQUOTE, space and controls
_ENTITY_TAG = re.compile(r'(?:W/)?"[\x21\x23-\x7e\x80-\xff]*"')


def json_text(value: object) -> str:
    """Return ``JSON.stringify(value)``: no spaces, non-ASCII left as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def etag_for(body: str | bytes) -> str:
    """Return a strong tag: the first 16 hex digits of the body's SHA-256, quoted.

    The tag depends only on the bytes, so equal bodies get equal tags on every
    instance and any change to the content changes the tag.
    """
    data = body.encode("utf-8") if isinstance(body, str) else body
    return f'"{hashlib.sha256(data).hexdigest()[:ETAG_HEX_DIGITS]}"'


def http_date(moment: datetime) -> str:
    """Return an IMF-fixdate (``Tue, 01 Jul 2025 09:00:00 GMT``), as toUTCString."""
    return format_datetime(moment.astimezone(UTC), usegmt=True)


def _opaque(tag: str) -> str:
    return tag[2:] if tag.startswith("W/") else tag


def weak_match(first: str, second: str) -> bool:
    """Return whether two entity-tags match weakly: equal once ``W/`` is ignored."""
    return _opaque(first) == _opaque(second)


def parse_entity_tags(header: str) -> list[str] | None:
    """Return the tags listed in an ``If-None-Match`` value; None means ``*``.

    The list is scanned for well-formed tags rather than split on commas, because
    a comma is allowed inside a quoted tag.
    """
    if header.strip() == "*":
        return None
    return _ENTITY_TAG.findall(header)


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


# --- the lesson's server, in process ---------------------------------------------


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes = b""


@dataclass(frozen=True)
class Resource:
    body: object
    cache_control: str
    last_modified: datetime | None = None
    vary: str | None = None


def respond(request_headers: Mapping[str, str], resource: Resource) -> Response:
    """Answer a GET for ``resource``: 304 when the client's copy is still valid."""
    text = json_text(resource.body)
    etag = etag_for(text)
    headers = {"cache-control": resource.cache_control, "etag": etag}
    if resource.last_modified is not None:
        headers["last-modified"] = http_date(resource.last_modified)
    if resource.vary is not None:
        headers["vary"] = resource.vary
    if is_not_modified(request_headers, etag, resource.last_modified):
        # A 304 repeats the validators and directives so the cache can refresh them.
        return Response(304, headers)
    body = text.encode("utf-8")
    headers["content-type"] = "application/json; charset=utf-8"
    headers["content-length"] = str(len(body))
    return Response(200, headers, body)


BOOK_ID = 7
BOOK_TITLE = "Sand: Borges Selection"
BOOK_AUTHOR = "Anthology"
BOOK_COPIES_AT_START = 3


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@dataclass
class LibraryApi:
    """The four endpoints of the lesson's server with their own throwaway state."""

    book: dict[str, object] = field(
        default_factory=lambda: {
            "bookId": BOOK_ID,
            "title": BOOK_TITLE,
            "author": BOOK_AUTHOR,
            "on_shelf": BOOK_COPIES_AT_START,
        }
    )
    book_modified: datetime = field(default_factory=lambda: _utc("2025-07-01T09:00"))
    stock: dict[str, object] = field(
        default_factory=lambda: {"branchId": 1, "on_shelf": 137}
    )
    history: dict[str, object] = field(
        default_factory=lambda: {"memberId": 4, "total": 12}
    )

    def _resources(self) -> dict[str, Callable[[], Resource]]:
        return {
            # rarely changes, same for everyone, language-dependent
            "/book/7": lambda: Resource(
                self.book,
                "public, max-age=60",
                last_modified=self.book_modified,
                vary="Accept-Language",
            ),
            # changes often; a few seconds of staleness is fine
            "/branch/1/stock": lambda: Resource(
                self.stock, "public, max-age=5, stale-while-revalidate=30"
            ),
            # one member's own data: never in a shared cache
            "/member/4/history": lambda: Resource(self.history, "private, max-age=30"),
            # must not be kept anywhere
            "/loan/approval": lambda: Resource(
                {"approval": "U-4711", "remaining": 2}, "no-store"
            ),
        }

    def handle(
        self, method: str, path: str, headers: Mapping[str, str] | None = None
    ) -> Response:
        if method == "POST" and path == "/book/7":
            # Someone borrows a copy: the content, and with it both validators, change.
            on_shelf = self.book["on_shelf"]
            assert isinstance(on_shelf, int)
            self.book["on_shelf"] = on_shelf - 1
            self.book_modified = _utc("2025-07-02T14:30")
            return Response(204, {"cache-control": "no-store"})
        resource = self._resources().get(path)
        if method not in ("GET", "HEAD") or resource is None:
            return Response(404, {"cache-control": "no-store"})
        return respond(headers or {}, resource())

    def paths(self) -> list[str]:
        return list(self._resources())


# --- the probe --------------------------------------------------------------------


def model(params: Params, progress: Progress) -> Tables:
    api = LibraryApi()
    book = "/book/7"
    progress(0.1, "first request: the validators")
    first = api.handle("GET", book)
    old_tag, old_date = first.headers["etag"], first.headers["last-modified"]

    progress(0.3, "conditional requests")
    probes: list[tuple[str, Response]] = [
        ("unconditional", api.handle("GET", book)),
        (
            "If-None-Match: current tag",
            api.handle("GET", book, {"If-None-Match": old_tag}),
        ),
        (
            "If-Modified-Since: current date",
            api.handle("GET", book, {"If-Modified-Since": old_date}),
        ),
    ]
    progress(0.5, "the book changes")
    api.handle("POST", book)
    probes.append(
        (
            "If-None-Match: tag from before the update",
            api.handle("GET", book, {"If-None-Match": old_tag}),
        )
    )
    after = api.handle("GET", book)

    progress(0.8, "directives by resource type")
    directives: list[list[Cell]] = [
        [path, api.handle("GET", path).headers["cache-control"]] for path in api.paths()
    ]
    return {
        "validators": table(
            ["request", "status", "downloaded_bytes"],
            [[label, r.status, len(r.body)] for label, r in probes],
        ),
        "directives": table(["path", "cache_control"], directives),
        "headers": table(
            ["response", "etag", "last_modified", "vary"],
            [
                ["before update", old_tag, old_date, first.headers["vary"]],
                [
                    "after update",
                    after.headers["etag"],
                    after.headers["last-modified"],
                    after.headers["vary"],
                ],
            ],
        ),
    }


LAB = Lab(
    slug="http-caching",
    title="HTTP Caching",
    params=(),
    model=model,
    charts=(
        Chart(
            table="validators",
            label="request",
            values=("downloaded_bytes",),
            title="Body bytes downloaded per request",
            unit="B",
        ),
    ),
)
