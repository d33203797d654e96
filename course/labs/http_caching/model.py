"""The model part of the http-caching lab: the lesson's server in process and the
conditional-request probe.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from course.labs.harness.base import Cell, Progress, Tables, table
from course.labs.http_caching.params import HttpCachingParams
from library.cache.http import etag_for, http_date, is_not_modified


def json_text(value: object) -> str:
    """Return ``JSON.stringify(value)``: no spaces, non-ASCII left as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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


def model(params: HttpCachingParams, progress: Progress) -> Tables:
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
