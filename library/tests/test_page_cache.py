"""The page tier: stored anonymous responses, answered before the view runs."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, cast

import pytest
from django.conf import settings
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from library.cache import pages, reads
from library.cache.metrics import cache_redis
from library.cache.store import refreshes_wait
from library.models import Book, Branch, Member
from library.services import loan_issue, stock_correct
from messaging.services import messaging_drain
from tests.asgi import http_exchange, http_scope

pytestmark = pytest.mark.django_db


def test_second_anonymous_get_is_served_from_the_page_tier(
    client: Client, book: Book
) -> None:
    # A search: one key (the plain first page is split into copies, tested below).
    url = reverse("branch-books", args=[book.branch_id]) + "?q=rose"
    first = client.get(url)
    second = client.get(url)
    assert (first["X-Page-Cache"], second["X-Page-Cache"]) == ("miss", "hit")
    assert first.context is not None
    assert second.context is None
    assert second.content == first.content
    for header in ("ETag", "Cache-Control", "X-Frame-Options", "Content-Type"):
        assert second[header] == first[header]


def test_matching_if_none_match_gets_a_304_from_the_tier(
    client: Client, book: Book
) -> None:
    url = reverse("book-detail", args=[book.pk])
    etag = client.get(url)["ETag"]
    answer = client.get(url, headers={"if-none-match": f'W/"x", {etag}'})
    assert answer.status_code == 304
    assert answer.content == b""
    assert answer["X-Page-Cache"] == "hit"
    assert answer["ETag"] == etag
    stale = client.get(url, headers={"if-none-match": '"0000000000000000"'})
    assert stale.status_code == 200
    assert stale["X-Page-Cache"] == "hit"


def test_if_modified_since_is_honoured_on_a_hit(client: Client, book: Book) -> None:
    url = reverse("book-detail", args=[book.pk])
    last_modified = client.get(url)["Last-Modified"]
    answer = client.get(url, headers={"if-modified-since": last_modified})
    assert (answer.status_code, answer["X-Page-Cache"]) == (304, "hit")


def test_a_write_changes_the_key_so_the_new_page_is_rendered(
    client: Client, book: Book, django_capture_on_commit_callbacks: Any
) -> None:
    url = reverse("book-detail", args=[book.pk])
    before = client.get(url)
    client.get(url)
    # Bumps the book's version; on commit, its version record (the page's key).
    with django_capture_on_commit_callbacks(execute=True):
        stock_correct(book_id=book.pk, on_shelf=7)
    after = client.get(url)
    assert after["X-Page-Cache"] == "miss"
    assert after["ETag"] != before["ETag"]
    assert after.context["detail"].book.on_shelf == 7


def test_the_outbox_retires_a_branchs_catalogue_pages(
    client: Client, book: Book, member: Member
) -> None:
    url = reverse("branch-books", args=[book.branch_id]) + "?q=rose"
    client.get(url)
    loan_issue(book_id=book.pk, member_id=member.pk)
    assert client.get(url)["X-Page-Cache"] == "hit"  # until the event is delivered
    messaging_drain(owner="test")
    after = client.get(url)
    assert after["X-Page-Cache"] == "miss"
    assert after.context["page"].object_list[0].on_shelf == 1


def test_one_branchs_page_is_never_served_for_another(client: Client) -> None:
    north = Branch.objects.create(name="North", city="Izmir")
    south = Branch.objects.create(name="South", city="Bursa")
    Book.objects.create(title="Only in the north", author="A", branch=north)
    Book.objects.create(title="Only in the south", author="B", branch=south)
    for _ in range(2):
        assert (
            b"Only in the north" in client.get(f"/branches/{north.pk}/books/").content
        )
        south_page = client.get(f"/branches/{south.pk}/books/").content
        assert b"Only in the south" in south_page
        assert b"Only in the north" not in south_page


def test_signed_in_pages_never_use_the_tier(
    client: Client, member_client: Client, book: Book
) -> None:
    url = reverse("branch-books", args=[book.branch_id])
    client.logout()
    Client().get(url)  # an anonymous visitor fills the tier
    member_client.force_login(Member.objects.get().user)  # type: ignore[arg-type]
    mine = member_client.get(url)
    assert "X-Page-Cache" not in mine
    assert b"ada" in mine.content  # the navigation names the reader
    assert mine["Cache-Control"].startswith("private")
    stored = [k for k in cache_redis().scan_iter(match="page:*") if b"ada" in k]
    assert stored == []


def test_a_messages_cookie_bypasses_the_tier(client: Client, book: Book) -> None:
    url = reverse("branch-books", args=[book.branch_id])
    client.get(url)
    client.cookies["messages"] = "anything"
    assert "X-Page-Cache" not in client.get(url)


@pytest.mark.parametrize(
    "change",
    ["cookie", "csrf", "private", "status"],
)
def test_only_shareable_responses_are_storable(change: str) -> None:
    response = HttpResponse(b"<p>page</p>")
    response["Cache-Control"] = "public, max-age=5"
    assert pages.storable(response)
    if change == "cookie":
        response.set_cookie("csrftoken", "secret")
    elif change == "csrf":
        response.content = b'<input name="csrfmiddlewaretoken" value="abc">'
    elif change == "private":
        response["Cache-Control"] = "private, max-age=5"
    else:
        response.status_code = 404
    assert not pages.storable(response)


def test_the_first_catalogue_page_is_split_into_copies(
    client: Client, book: Book, cache_tenants_of_this_test: str
) -> None:
    url = reverse("branch-books", args=[book.branch_id])
    for _ in range(40):
        client.get(url)
    scope = f"{cache_tenants_of_this_test}-branch-{book.branch_id}"
    copies = {
        k.rsplit(b"#", 1)[1]
        for k in cache_redis().scan_iter(match=f"page:*{scope}:*")
        if not k.endswith(b":body")
    }
    assert copies == {f"c{n}".encode() for n in range(pages.HOT_COPIES)}
    searched = client.get(url, {"q": "rose"})
    assert searched["X-Page-Cache"] == "miss"


def test_stock_json_lists_every_book_and_404s_unknown_branches(
    client: Client, branch: Branch
) -> None:
    Book.objects.bulk_create(
        [
            Book(title=f"T{n:03}", author="A", branch=branch, on_shelf=n)
            for n in range(30)
        ]
    )
    body = client.get(f"/branches/{branch.pk}/stock.json").json()
    assert (body["titles"], body["on_shelf"]) == (30, sum(range(30)))
    assert [b["title"] for b in body["books"]][:2] == ["T000", "T001"]
    missing = client.get("/branches/999999/stock.json")
    assert missing.status_code == 404
    assert missing.json() == {"error": "no such branch"}


# --- the ASGI front -------------------------------------------------------------------


async def asgi_exchange(
    app: Any, path: str, *, host: str = "testserver", cookie: str = "", etag: str = ""
) -> tuple[int, dict[str, str], bytes]:
    """Send one GET through an ASGI application, as daphne would."""
    path_only, _, query = path.partition("?")
    headers = []
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    if etag:
        headers.append((b"if-none-match", etag.encode()))
    scope = http_scope(path_only, query, host=host, headers=headers)
    start, body = await http_exchange(app, scope)
    names = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], names, body


def asgi_get(
    path: str, *, host: str = "testserver", cookie: str = "", etag: str = ""
) -> tuple[int, dict[str, str], bytes]:
    """Send one GET through the project's ASGI application, as daphne would."""
    from asgiref.sync import async_to_sync

    from config.asgi import application

    return async_to_sync(asgi_exchange)(
        application, path, host=host, cookie=cookie, etag=etag
    )


@pytest.mark.django_db(transaction=True)
def test_the_asgi_front_replays_a_stored_page_with_every_header(book: Book) -> None:
    path = f"/branches/{book.branch_id}/books/?q=rose"
    status, first, body = asgi_get(path)  # Django renders, the middleware stores
    assert (status, first["x-page-cache"]) == (200, "miss")
    status, again, replayed = asgi_get(path)
    assert (status, again["x-page-cache"]) == (200, "hit")
    assert replayed == body
    for header in ("x-frame-options", "x-content-type-options", "referrer-policy"):
        assert again[header] == first[header]
    assert int(again["content-length"]) == len(body)
    etag = again["etag"]
    status, not_modified, empty = asgi_get(path, etag=etag)
    assert (status, empty, not_modified["etag"]) == (304, b"", etag)


@pytest.mark.django_db(transaction=True)
def test_the_asgi_front_leaves_sessions_bad_hosts_and_plain_http_to_django(
    book: Book, settings
) -> None:
    path = f"/branches/{book.branch_id}/books/?q=rose"
    asgi_get(path)
    assert asgi_get(path)[1]["x-page-cache"] == "hit"
    status, headers, _ = asgi_get(path, cookie=f"{settings.SESSION_COOKIE_NAME}=x")
    assert status == 200
    assert "x-page-cache" not in headers  # a session: never the shared copy
    assert asgi_get(path, host="evil.example")[0] == 400
    # With the redirect on, plain HTTP is the security middleware's to answer (it
    # reads the setting once at start-up, so here it is only the tier stepping aside).
    settings.SECURE_SSL_REDIRECT = True
    assert "x-page-cache" not in asgi_get(path)[1]


def test_a_matching_validator_is_answered_from_the_head_alone(
    client: Client, book: Book, cache_tenants_of_this_test: str
) -> None:
    url = reverse("branch-books", args=[book.branch_id]) + "?q=rose"
    etag = client.get(url)["ETag"]
    pattern = f"page:*{cache_tenants_of_this_test}-branch-*:body"
    (body_key,) = list(cache_redis().scan_iter(match=pattern))
    cache_redis().delete(body_key)  # only the small head is left
    answer = client.get(url, headers={"if-none-match": etag})
    assert (answer.status_code, answer["X-Page-Cache"]) == (304, "hit")
    # Without a matching validator the body is needed: gone, so the view renders.
    again = client.get(url, headers={"if-none-match": '"other"'})
    assert (again.status_code, again["X-Page-Cache"]) == (200, "miss")


def test_the_home_page_is_kept_for_seconds_only(
    client: Client, book: Book, cache_tenants_of_this_test: str
) -> None:
    first = client.get("/")
    second = client.get("/")
    assert (first["X-Page-Cache"], second["X-Page-Cache"]) == ("miss", "hit")
    assert first["Cache-Control"].startswith("public, max-age=")
    redis = cache_redis()
    scope = cache_tenants_of_this_test
    kept = list(redis.scan_iter(match=f"page:*{scope}-library*"))
    assert kept  # the page and its head (validators)
    # No event retires the sum of every branch: only the lifetime (5 s + jitter),
    # and past it a stale window of 25 s in which the ASGI front may serve it.
    assert all(0 < redis.pttl(key) <= 31_000 for key in kept)


def _age_the_home_page(scope: str) -> bytes:
    """Move the stored home page's fresh time into the past; return its head key."""
    redis = cache_redis()
    (head_key,) = [
        key
        for key in redis.scan_iter(match=f"page:*{scope}-library*")
        if not key.endswith((b":body", b":refresh"))
    ]
    head = json.loads(cast(bytes, redis.get(head_key)))
    assert head["f"] > time.time() * 1000  # stored fresh, with its fresh time
    head["f"] = 0
    redis.set(head_key, json.dumps(head), keepttl=True)
    return head_key


@pytest.mark.django_db(transaction=True)
def test_a_stale_home_page_is_served_while_one_render_runs_behind_it(
    book: Book, cache_tenants_of_this_test: str
) -> None:
    from asgiref.sync import async_to_sync
    from django.core.asgi import get_asgi_application

    tier = pages.PageTierASGI(get_asgi_application())
    status, first, body = async_to_sync(asgi_exchange)(tier, "/")
    assert (status, first["x-page-cache"]) == (200, "miss")
    head_key = _age_the_home_page(cache_tenants_of_this_test)

    async def visits() -> tuple[list[str], int, str]:
        seen = []
        for _ in range(3):  # the first takes the lease; the others find it taken
            _, headers, stale_body = await asgi_exchange(tier, "/")
            seen.append(headers["x-page-cache"])
            assert stale_body == body
        renders = list(tier._renders)
        await asyncio.gather(*renders)
        _, after, _ = await asgi_exchange(tier, "/")
        return seen, len(renders), after["x-page-cache"]

    seen, renders, after = async_to_sync(visits)()
    assert seen == ["stale", "stale", "stale"]
    assert renders == 1  # one render for every visitor who found it stale
    assert after == "hit"  # rendered afresh and stored, fresh again
    redis = cache_redis()
    assert json.loads(cast(bytes, redis.get(head_key)))["f"] > time.time() * 1000
    assert redis.get(head_key + b":refresh") is None  # the lease is freed


def test_the_django_stack_alone_renders_a_stale_page_itself(
    client: Client, book: Book, cache_tenants_of_this_test: str
) -> None:
    # Without the ASGI front nothing renders behind the visitor: stale is a miss.
    assert client.get("/")["X-Page-Cache"] == "miss"
    _age_the_home_page(cache_tenants_of_this_test)
    assert client.get("/")["X-Page-Cache"] == "miss"
    assert client.get("/")["X-Page-Cache"] == "hit"


@pytest.mark.django_db(transaction=True)
def test_the_home_figures_age_like_a_branchs(book: Book, member: Member) -> None:
    now = [1_000_000.0]
    before = reads.library_overview(clock=lambda: now[0])
    loan_issue(book_id=book.pk, member_id=member.pk)
    messaging_drain(owner="test")
    # Fresh for CACHE_STOCK_FRESH_S: the loan is not in the figures yet.
    fresh = reads.library_overview(clock=lambda: now[0])
    assert [b.shelf_total for b in fresh] == [b.shelf_total for b in before]
    now[0] += settings.CACHE_STOCK_FRESH_S + 1
    # Stale: served at once while one refresh runs in the background.
    stale = reads.library_overview(clock=lambda: now[0])
    assert [b.shelf_total for b in stale] == [b.shelf_total for b in before]
    assert refreshes_wait(5)
    after = reads.library_overview(clock=lambda: now[0])
    assert [b.open_loans for b in after] == [b.open_loans + 1 for b in before]
