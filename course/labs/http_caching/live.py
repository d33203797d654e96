"""The live part of the http-caching lab: the real views behind a real daphne."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httpx
from django.contrib.auth import get_user_model

from course.labs.harness.base import Cell, LabError, Params, Progress, Tables, table
from course.labs.harness.live import live_step, new_run_id
from course.labs.harness.live_http import daphnes, host_header
from library.models import Book, Member
from library.permissions import ISSUE_LOAN, permission_get
from library.services import stock_correct

# --- live part: the real views behind a real daphne ------------------------------

LIVE_BOOK_ID = 7
LIVE_LOGIN_PATH = "/accounts/login/"


@contextmanager
def live_server(progress: Progress) -> Iterator[Any]:
    """Start daphne on a free port (same database and Redis); yield an httpx client.

    The server keeps this process's LIBRARY_CACHE and is stopped with its whole
    process group however the block ends.
    """

    # The Host header only, as this lab has always sent: request_headers' proxy
    # header would also bring the CSRF Referer check into its sign-in.
    cache = os.environ.get("LIBRARY_CACHE", "on")
    with (
        daphnes(progress, [cache]) as (server,),
        httpx.Client(
            base_url=server.base_url,
            headers={"Host": host_header(server.port)},
            timeout=30.0,
        ) as client,
    ):
        yield client


def _expect(response: Any, status: int, what: str) -> Any:

    if response.status_code != status:
        raise LabError(
            f"live: {what} answered {response.status_code}, expected {status}"
        )
    return response


def _csrf_token(html: str) -> str:

    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    if found is None:
        raise LabError("live: the sign-in form carries no CSRF token")
    return found.group(1)


@contextmanager
def signed_in_staff(client: Any, run: str) -> Iterator[None]:
    """Create a throwaway staff account, sign in through the real form, and at the
    end sign out and delete the account."""

    users = get_user_model()
    username = f"lab-live-{run}"
    password = secrets.token_urlsafe(18)
    account = users.objects.create_user(
        username=username, password=password, is_staff=True
    )
    # The desk's form is one of the pages read; staff alone would get its 403.
    account.user_permissions.add(permission_get(ISSUE_LOAN))
    try:
        form = _expect(client.get(LIVE_LOGIN_PATH), 200, "the sign-in form")
        _expect(
            client.post(
                LIVE_LOGIN_PATH,
                data={
                    "login": username,
                    "password": password,
                    "csrfmiddlewaretoken": _csrf_token(form.text),
                },
            ),
            302,
            "signing in",
        )
        yield
    finally:
        token = client.cookies.get("csrftoken")
        if token:
            with suppress(Exception):
                client.post("/accounts/logout/", data={"csrfmiddlewaretoken": token})
        client.cookies.clear()
        users.objects.filter(username=username).delete()


def live(params: Params, progress: Progress) -> Tables:
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
    with live_server(progress) as client:
        try:
            live_step(progress, 0.3, f"first GET {path}: the validators")
            first = _expect(client.get(path), 200, f"GET {path}")
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
            after = _expect(client.get(path), 200, f"GET {path} after the update")
        finally:
            if changed:
                stock_correct(book_id=LIVE_BOOK_ID, on_shelf=shelf)

        live_step(progress, 0.7, "directives by resource type")
        anonymous = [path, f"/branches/{book['branch_id']}/"]
        signed_in = [f"/members/{member}/", "/loans/issue/"]
        directives: list[list[Cell]] = []
        for page in anonymous:
            response = _expect(client.get(page), 200, f"GET {page}")
            directives.append([page, response.headers.get("cache-control")])
        with signed_in_staff(client, run):
            for page in signed_in:
                response = _expect(client.get(page), 200, f"GET {page} (staff)")
                directives.append([page, response.headers.get("cache-control")])
    return {
        "live_validators": table(
            ["request", "status", "downloaded_bytes"],
            [[label, r.status_code, r.num_bytes_downloaded] for label, r in probes],
        ),
        "live_directives": table(["path", "cache_control"], directives),
        "live_headers": table(
            ["response", "etag", "last_modified", "vary"],
            [
                ["before update", old_tag, old_date, first.headers.get("vary")],
                [
                    "after update",
                    after.headers.get("etag"),
                    after.headers.get("last-modified"),
                    after.headers.get("vary"),
                ],
            ],
        ),
    }
