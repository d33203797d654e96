"""HTTP caching of the library's pages: validators, conditional GETs, directives."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpResponse, HttpResponseBase
from django.test import Client, RequestFactory
from django.urls import reverse

from library.cache import http
from library.models import Book, Member
from library.services import loan_issue

pytestmark = pytest.mark.django_db


def vary(response: HttpResponseBase) -> set[str]:
    return {v.strip().lower() for v in response.get("Vary", "").split(",") if v}


def test_book_detail_is_public_with_a_strong_tag_and_last_modified(
    client: Client, book: Book
) -> None:
    response = client.get(reverse("book-detail", args=[book.pk]))

    assert response["Cache-Control"] == "public, max-age=60"
    assert response["ETag"] == http.etag_for(response.content)
    assert not response["ETag"].startswith("W/")
    assert response["Last-Modified"] == http.http_date(book.updated_at)
    # The page reads the user (navigation): shared caches must keep variants apart.
    assert "cookie" in vary(response)


def test_304_has_no_body_and_repeats_the_validators(client: Client, book: Book) -> None:
    url = reverse("book-detail", args=[book.pk])
    first = client.get(url)

    again = client.get(url, headers={"If-None-Match": first["ETag"]})

    assert again.status_code == 304
    assert again.content == b""
    for name in ("ETag", "Last-Modified", "Cache-Control"):
        assert again[name] == first[name]
    assert "cookie" in vary(again)


def test_a_list_with_a_weak_tag_matches(client: Client, book: Book) -> None:
    url = reverse("book-detail", args=[book.pk])
    tag = client.get(url)["ETag"]

    header = f'"0000000000000000", W/{tag}'
    assert client.get(url, headers={"If-None-Match": header}).status_code == 304
    assert client.get(url, headers={"If-None-Match": '"nope"'}).status_code == 200


def test_if_modified_since_answers_304_only_without_if_none_match(
    client: Client, book: Book
) -> None:
    url = reverse("book-detail", args=[book.pk])
    date = client.get(url)["Last-Modified"]

    assert client.get(url, headers={"If-Modified-Since": date}).status_code == 304
    both = {"If-Modified-Since": date, "If-None-Match": '"other"'}
    assert client.get(url, headers=both).status_code == 200


def test_the_validators_change_after_a_loan(
    client: Client, book: Book, member: Member, django_capture_on_commit_callbacks
) -> None:
    url = reverse("book-detail", args=[book.pk])
    before = client.get(url)

    with django_capture_on_commit_callbacks(execute=True):  # as a commit runs them
        loan_issue(book_id=book.pk, member_id=member.pk)
    after = client.get(url, headers={"If-None-Match": before["ETag"]})

    assert after.status_code == 200
    assert after["ETag"] != before["ETag"]
    assert (
        after.context["detail"].book.version
        == before.context["detail"].book.version + 1
    )


def test_a_signed_in_copy_is_private_and_validated_by_its_tag_only(
    member_client: Client, book: Book
) -> None:
    response = member_client.get(reverse("book-detail", args=[book.pk]))

    # The navigation carries the user's name and a CSRF token.
    assert b"ada" in response.content
    assert response["Cache-Control"] == "private, max-age=60"
    assert "Last-Modified" not in response
    assert "cookie" in vary(response)
    # The token's mask differs in every rendering: the tag is weak, and it still
    # validates the next request.
    assert response["ETag"].startswith("W/")
    url = reverse("book-detail", args=[book.pk])
    again = member_client.get(url, headers={"If-None-Match": response["ETag"]})
    assert (again.status_code, again.content) == (304, b"")


def test_a_new_csrf_secret_changes_the_weak_tag(
    member_client: Client, book: Book
) -> None:
    url = reverse("book-detail", args=[book.pk])
    before = member_client.get(url)["ETag"]
    member_client.cookies.pop("csrftoken")  # as after a new sign-in: a new secret
    after = member_client.get(url, headers={"If-None-Match": before})
    assert after.status_code == 200
    assert after["ETag"] != before


def test_staff_book_page_with_loans_is_private(
    staff_client: Client, book: Book, member: Member
) -> None:
    loan_issue(book_id=book.pk, member_id=member.pk)
    response = staff_client.get(reverse("book-detail", args=[book.pk]))
    assert b"Ada Lovelace" in response.content
    assert response["Cache-Control"] == "private, max-age=60"


@pytest.mark.parametrize("name", ["branch-detail", "branch-books"])
def test_branch_pages_are_stock_with_a_tag(
    client: Client, book: Book, name: str
) -> None:
    url = reverse(name, args=[book.branch_id])
    response = client.get(url)

    assert response["Cache-Control"] == "public, max-age=5, stale-while-revalidate=30"
    assert response["ETag"] == http.etag_for(response.content)
    assert "Last-Modified" not in response
    again = client.get(url, headers={"If-None-Match": response["ETag"]})
    assert (again.status_code, again.content) == (304, b"")


def test_stock_max_age_follows_the_configured_fresh_window(
    client: Client, book: Book, settings: Any
) -> None:
    settings.CACHE_STOCK_FRESH_S = 12
    response = client.get(reverse("branch-stock", args=[book.branch_id]))
    assert response["Cache-Control"] == "public, max-age=12, stale-while-revalidate=30"


def test_member_history_is_private_and_answers_304(
    member_client: Client, member: Member
) -> None:
    url = reverse("member-detail", args=[member.pk])
    response = member_client.get(url)

    assert response["Cache-Control"] == "private, max-age=30"
    again = member_client.get(url, headers={"If-None-Match": response["ETag"]})
    assert (again.status_code, again.content) == (304, b"")
    assert again["Cache-Control"] == "private, max-age=30"


def test_loan_forms_are_never_stored(staff_client: Client, book: Book) -> None:
    response = staff_client.get(reverse("loan-issue"), {"book": book.pk})
    assert "no-store" in response["Cache-Control"]
    assert "ETag" not in response


def test_private_variant_only_swaps_public() -> None:
    assert http.private_variant(http.BOOK) == "private, max-age=60"
    assert http.private_variant(http.stock_directives(5)) == (
        "private, max-age=5, stale-while-revalidate=30"
    )
    assert http.private_variant(http.HISTORY) == http.HISTORY


def test_conditional_leaves_errors_and_posts_alone() -> None:
    factory = RequestFactory()
    missing = HttpResponse(b"gone", status=404)
    result = http.conditional(factory.get("/"), missing, cache_control=http.BOOK)
    assert result is missing
    assert "ETag" not in result
    ok = HttpResponse(b"done")
    assert "ETag" not in http.conditional(
        factory.post("/"), ok, cache_control=http.BOOK
    )
