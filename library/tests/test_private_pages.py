"""Signed-in pages say ``private``; anonymous public pages keep their own directives."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from course.lessons import LESSONS
from library.middleware import SIGNED_IN
from library.models import Book
from library.tests.test_page_cache import asgi_get

pytestmark = pytest.mark.django_db


def _pages(book: Book) -> dict[str, str]:
    return {
        "course index": "/course/",
        "lesson": f"/course/{LESSONS[0].slug}/",
        "live": reverse("branch-live", args=[book.branch_id]),
    }


@pytest.mark.parametrize("kind", ["course index", "lesson", "live"])
def test_a_signed_in_page_is_private_and_varies_on_the_cookie(
    member_client: Client, book: Book, kind: str
) -> None:
    response = member_client.get(_pages(book)[kind])
    assert response.status_code == 200
    assert b"ada" in response.content  # the navigation names the reader
    assert response["Cache-Control"] == SIGNED_IN
    assert "Cookie" in [v.strip() for v in response["Vary"].split(",")]


def test_directives_a_view_chose_are_kept(member_client: Client, book: Book) -> None:
    catalogue = member_client.get(reverse("branch-books", args=[book.branch_id]))
    assert catalogue["Cache-Control"].startswith("private, max-age=")
    home = member_client.get(reverse("home"))
    assert b"ada" in home.content
    assert home["Cache-Control"].startswith("private, max-age=")


def test_a_form_keeps_its_no_store(staff_client: Client, book: Book) -> None:
    form = staff_client.get(reverse("loan-issue"))
    assert "no-store" in form["Cache-Control"]


@pytest.mark.parametrize(
    "name", ["home", "branch-books", "branch-detail", "book-detail"]
)
def test_anonymous_public_pages_keep_their_public_directives(
    client: Client, book: Book, name: str
) -> None:
    args = {"home": [], "book-detail": [book.pk]}.get(name, [book.branch_id])
    response = client.get(reverse(name, args=args))
    assert response["Cache-Control"].startswith("public, max-age=")


def test_anonymous_pages_without_directives_get_none(
    client: Client, book: Book
) -> None:
    for url in _pages(book).values():
        assert "Cache-Control" not in client.get(url)


@pytest.mark.django_db(transaction=True)
def test_the_async_chain_marks_signed_in_pages_too(member_client: Client) -> None:
    session = member_client.cookies[settings.SESSION_COOKIE_NAME].value
    cookie = f"{settings.SESSION_COOKIE_NAME}={session}"
    status, headers, body = asgi_get("/course/", cookie=cookie)
    assert (status, headers["cache-control"]) == (200, SIGNED_IN)
    assert b"ada" in body
    status, headers, _ = asgi_get("/course/")
    assert status == 200
    assert "cache-control" not in headers
