"""The live part of the http-caching lab: the real views behind a real daphne."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from course.labs.harness.base import (
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step, new_run_id
from course.labs.harness.live_http import (
    daphne_client,
    expect_status,
    signed_in_staff,
)
from course.labs.http_caching.params import HttpCachingParams
from library.models import Book, Member
from library.services import stock_correct

# --- live part: the real views behind a real daphne ------------------------------

LIVE_BOOK_ID = 7


@dataclass(frozen=True)
class Answer:
    """What the client kept of one response."""

    status: int
    downloaded_bytes: int
    etag: str | None
    last_modified: str | None
    vary: str | None

    @classmethod
    def of(cls, response: httpx.Response) -> Answer:
        return cls(
            response.status_code,
            response.num_bytes_downloaded,
            response.headers.get("etag"),
            response.headers.get("last-modified"),
            response.headers.get("vary"),
        )


@dataclass(frozen=True)
class Measurement:
    probes: list[tuple[str, Answer]]  # (request, its answer)
    first: Answer  # the book page before its update
    after: Answer  # and after
    directives: list[tuple[str, str | None]]  # (path, Cache-Control)


def measure(params: HttpCachingParams, progress: Progress) -> Measurement:
    """Ask the real book page for its validators, then read the real directives.

    1. GET ``/books/7/`` anonymously twice, then with ``If-None-Match`` (its ETag)
       and with ``If-Modified-Since`` (its Last-Modified): 200, 200, 304, 304.
    2. Correct the book's shelf count through ``library.services.stock_correct``
       (the version bumps, the page changes); the tag from before gets a 200.
    3. The Cache-Control of a book, its branch, a member's history and the loan form,
       the last two signed in as a throwaway staff account.
    4. The shelf count is put back and the account deleted, however the run ends.
    """
    book = Book.objects.filter(pk=LIVE_BOOK_ID).values("on_shelf", "branch_id").first()
    if book is None:
        raise LabError(f"live: the database has no book #{LIVE_BOOK_ID}")
    member = Member.objects.order_by("pk").values_list("pk", flat=True).first()
    if member is None:
        raise LabError("live: the database has no member")
    path = f"/books/{LIVE_BOOK_ID}/"
    run = new_run_id()
    shelf = int(book["on_shelf"])
    changed = False
    with daphne_client(progress) as client:
        try:
            live_step(progress, 0.3, f"first GET {path}: the validators")
            first = expect_status(client.get(path), 200, f"GET {path}")
            old_tag = first.headers.get("etag")
            old_date = first.headers.get("last-modified")
            if old_tag is None or old_date is None:
                raise LabError(f"live: GET {path} carries no ETag or Last-Modified")
            live_step(progress, 0.4, "conditional requests")
            probes = [
                ("unconditional", client.get(path)),
                (
                    "If-None-Match: current tag",
                    client.get(path, headers={"If-None-Match": old_tag}),
                ),
                (
                    "If-Modified-Since: current date",
                    client.get(path, headers={"If-Modified-Since": old_date}),
                ),
            ]
            live_step(progress, 0.5, "the book changes (stock correction)")
            changed = True
            stock_correct(book_id=LIVE_BOOK_ID, on_shelf=shelf + 1)
            probes.append(
                (
                    "If-None-Match: tag from before the update",
                    client.get(path, headers={"If-None-Match": old_tag}),
                )
            )
            after = expect_status(client.get(path), 200, f"GET {path} after the update")
        finally:
            if changed:
                stock_correct(book_id=LIVE_BOOK_ID, on_shelf=shelf)

        live_step(progress, 0.7, "directives by resource type")
        anonymous = [path, f"/branches/{book['branch_id']}/"]
        signed_in = [f"/members/{member}/", "/loans/issue/"]
        directives: list[tuple[str, str | None]] = []
        for page in anonymous:
            response = expect_status(client.get(page), 200, f"GET {page}")
            directives.append((page, response.headers.get("cache-control")))
        with signed_in_staff(client, run):
            for page in signed_in:
                response = expect_status(client.get(page), 200, f"GET {page} (staff)")
                directives.append((page, response.headers.get("cache-control")))
    return Measurement(
        probes=[(label, Answer.of(response)) for label, response in probes],
        first=Answer.of(first),
        after=Answer.of(after),
        directives=directives,
    )


def tables(params: HttpCachingParams, measured: Measurement) -> Tables:
    """The validators' answers, the directives, the headers before and after."""
    first, after = measured.first, measured.after
    return {
        "live_validators": table(
            ["request", "status", "downloaded_bytes"],
            [
                [label, answer.status, answer.downloaded_bytes]
                for label, answer in measured.probes
            ],
        ),
        "live_directives": table(
            ["path", "cache_control"],
            [[path, directive] for path, directive in measured.directives],
        ),
        "live_headers": table(
            ["response", "etag", "last_modified", "vary"],
            [
                ["before update", first.etag, first.last_modified, first.vary],
                ["after update", after.etag, after.last_modified, after.vary],
            ],
        ),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
