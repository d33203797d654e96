"""The page tier's keys: only the parameters a page reads make its key."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from library.cache.metrics import cache_redis
from library.models import Book
from library.selectors import BOOKS_PER_PAGE

pytestmark = pytest.mark.django_db

JUNK = "x" * 3000


def second_page_of_roses(book: Book) -> None:
    # Page 2 must exist: a number past the last page is never stored.
    Book.objects.bulk_create(
        Book(title=f"The Rose {n}", author="Anon", branch_id=book.branch_id)
        for n in range(BOOKS_PER_PAGE)
    )


def page_keys(scope: str) -> set[bytes]:
    return set(cache_redis().scan_iter(match=f"page:*{scope}*"))


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("branch-books", "?q=Rose"),
        ("branch-books", ""),  # the hot first page, split into copies
        ("branch-books", "?q=Rose&page=2"),
        ("book-detail", ""),
        ("branch-stock", ""),
    ],
)
def test_unique_junk_parameters_create_no_keys_beyond_the_pages_own(
    client: Client, book: Book, cache_tenants_of_this_test: str, name: str, first: str
) -> None:
    if "page=2" in first:
        second_page_of_roses(book)
    arg = book.pk if name == "book-detail" else book.branch_id
    url = reverse(name, args=[arg]) + first
    joiner = "&" if first else "?"
    # Junk before the page was ever stored: the miss is rendered, not kept.
    for n in range(20):
        client.get(f"{url}{joiner}junk{n}={JUNK}")
    assert page_keys(cache_tenants_of_this_test) == set()
    for _ in range(40):  # enough to fill every copy of the hot page
        client.get(url)
    own = page_keys(cache_tenants_of_this_test)
    assert own
    for n in range(200):
        answer = client.get(f"{url}{joiner}utm_{n}={n}{JUNK}")
        assert answer["X-Page-Cache"] == "hit"  # the page's own entry serves it
    assert page_keys(cache_tenants_of_this_test) == own


def test_a_stored_page_never_echoes_a_junk_parameter(
    client: Client, book: Book
) -> None:
    url = reverse("branch-books", args=[book.branch_id]) + "?q=Rose"
    junk = client.get(url + "&marker=injected")
    assert b"injected" in junk.content  # the sign-in link echoes the full path
    assert junk["X-Page-Cache"] == "miss"
    assert client.get(url)["X-Page-Cache"] == "miss"  # the junk copy was not kept
    clean = client.get(url)
    assert clean["X-Page-Cache"] == "hit"
    assert b"injected" not in clean.content


@pytest.mark.parametrize(
    "query",
    [
        "page=0",
        "page=-1",
        "page=abc",
        "page=%202",
        "page=02",
        "page=3&page=4",
        pytest.param(f"page={JUNK}", id="page=long"),
        pytest.param(f"q={JUNK}", id="q=over-long"),
        "q=a&q=b",
    ],
)
def test_values_the_tier_cannot_model_are_left_to_the_view(
    client: Client, book: Book, cache_tenants_of_this_test: str, query: str
) -> None:
    url = reverse("branch-books", args=[book.branch_id]) + "?" + query
    for _ in range(2):
        answer = client.get(url)
        assert answer.status_code == 200
        assert "X-Page-Cache" not in answer
    assert page_keys(cache_tenants_of_this_test) == set()


def test_equal_questions_share_one_entry(
    client: Client, book: Book, cache_tenants_of_this_test: str
) -> None:
    second_page_of_roses(book)
    url = reverse("branch-books", args=[book.branch_id])
    client.get(url, {"q": "the rose", "page": "2"})
    # The same question spelled differently: parameter order and space encoding.
    again = client.get(url + "?page=2&q=the%20rose")
    assert again["X-Page-Cache"] == "hit"
    heads = {
        k for k in page_keys(cache_tenants_of_this_test) if not k.endswith(b":body")
    }
    assert len(heads) == 1
