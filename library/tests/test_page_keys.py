"""The page tier's keys: only the parameters a page reads make its key."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from library.cache.metrics import KEY_PREFIX as METRICS_PREFIX
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
        ("branch-books", "?q=rose"),
        ("branch-books", ""),  # the hot first page, split into copies
        ("branch-books", "?q=rose&page=2"),
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
    url = reverse("branch-books", args=[book.branch_id]) + "?q=rose"
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


def stored_keys() -> set[bytes]:
    """Return every key of the cache's Redis database but the metric buckets.

    The buckets are one hash per namespace and minute (``cachemetrics:``): they grow
    with time, never with requests, and a minute may turn during the test.
    """
    prefix = f"{METRICS_PREFIX}:".encode()
    return {key for key in cache_redis().scan_iter() if not key.startswith(prefix)}


def junk_forms(book: Book) -> list[str]:
    """Return many spellings of the pages warmed below, none of them canonical."""
    b, k = book.branch_id, book.pk
    junk = []
    for zeros in range(1, 31):
        pad = "0" * zeros
        junk += [
            f"/books/{pad}{k}/",
            f"/branches/{pad}{b}/books/",
            f"/branches/{pad}{b}/books/?q=rose",
            f"/branches/{pad}{b}/books/?page=2",
            f"/branches/{pad}{b}/stock.json",
        ]
    # Numbers past the last page (the data tier would key each), and odd numbers.
    junk += [f"/branches/{b}/books/?page={n}" for n in range(3, 63)]
    junk += [f"/branches/{b}/books/?q=rose&page={n}" for n in range(2, 32)]
    junk += [f"/branches/{b}/books/?page={n}" for n in ("+2", "%202", "02", "1")]
    # The same search in other ASCII capitals and with spaces around it.
    spellings = ["ROSE", "Rose", "rOSE", "RoSe", "rosE", "%20rose", "rose%20%20"]
    junk += [f"/branches/{b}/books/?q={text}" for text in spellings]
    junk += [f"/branches/{b}/books/?q={text}&page=2" for text in spellings[:3]]
    # Parameters the page ignores, and repeated ones.
    junk += [f"/branches/{b}/books/?utm_source=n{n}" for n in range(30)]
    junk += [f"/books/{k}/?v={n}" for n in range(30)]
    junk += [f"/branches/{b}/books/?page=2&page={n}" for n in range(3, 13)]
    return junk


def test_junk_forms_of_a_page_create_no_redis_key(client: Client, book: Book) -> None:
    second_page_of_roses(book)
    b = book.branch_id
    warm = [
        f"/books/{book.pk}/",
        f"/branches/{b}/books/",
        f"/branches/{b}/books/?q=rose",
        f"/branches/{b}/books/?page=2",
        f"/branches/{b}/books/?q=rose&page=2",
        f"/branches/{b}/stock.json",
    ]
    for url in warm:
        for _ in range(40):  # enough to fill every copy of the hot page
            assert client.get(url).status_code == 200
    before = stored_keys()
    assert before
    for url in junk_forms(book):
        assert client.get(url).status_code == 200, url
    assert stored_keys() - before == set()


def test_a_padded_path_is_served_the_canonical_entry(
    client: Client, book: Book
) -> None:
    url = reverse("book-detail", args=[book.pk])
    client.get(url)
    padded = client.get(f"/books/000{book.pk}/")
    assert padded["X-Page-Cache"] == "hit"
    assert padded.content == client.get(url).content


def test_a_search_in_other_capitals_finds_the_same_books(
    client: Client, book: Book
) -> None:
    url = reverse("branch-books", args=[book.branch_id])
    upper = client.get(url, {"q": "ROSE"})  # rendered, not kept: not canonical
    lower = client.get(url, {"q": "rose"})
    assert (upper["X-Page-Cache"], lower["X-Page-Cache"]) == ("miss", "miss")
    assert [b.pk for b in upper.context["page"].object_list] == [book.pk]
    assert [b.pk for b in lower.context["page"].object_list] == [book.pk]
    assert 'value="ROSE"' in upper.content.decode()  # the visitor's own words
    assert client.get(url, {"q": "Rose"})["X-Page-Cache"] == "hit"
