"""A page number past the last page shows the last page, never stored as its own.

The page tier keys a catalogue page by its number; a number the catalogue does not
have would render the last page under a key of its own, so a crawler walking
``?page=N`` could fill Redis with copies of one page.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from library.cache.metrics import cache_redis
from library.cache.pages import PAGE
from library.models import Book, Branch
from library.selectors import BOOKS_PER_PAGE

pytestmark = pytest.mark.django_db


def page_tier_keys(scope: str) -> set[bytes]:
    """The page-tier keys of this test's tenants (heads and bodies)."""
    return set(cache_redis().scan_iter(match=f"{PAGE.namespace}:*{scope}*"))


@pytest.fixture
def catalogue(branch: Branch) -> Branch:
    Book.objects.bulk_create(
        Book(title=f"Book {n:03}", author="Anon", branch=branch, on_shelf=1)
        for n in range(BOOKS_PER_PAGE * 2 + 1)  # three pages
    )
    return branch


def test_out_of_range_pages_add_no_page_tier_keys(
    client: Client, catalogue: Branch, cache_tenants_of_this_test: str
) -> None:
    url = reverse("branch-books", args=[catalogue.pk])
    for n in (1, 2, 3):  # the real pages are stored as usual
        client.get(url, {"page": n})
    before = page_tier_keys(cache_tenants_of_this_test)
    assert before  # the tier is on: the count below can move

    for n in range(4, 54):
        response = client.get(url, {"page": n})
        # Still the last page, as Paginator.get_page answers, only not kept.
        assert response.status_code == 200
        assert response["X-Page-Cache"] == "miss"
        assert response.context["page"].number == 3
    for n in range(1000, 1050):  # and with a search
        client.get(url, {"q": "Book", "page": str(n)})

    assert page_tier_keys(cache_tenants_of_this_test) == before


def test_a_page_past_the_end_is_rendered_every_time_not_served_stored(
    client: Client, catalogue: Branch
) -> None:
    url = reverse("branch-books", args=[catalogue.pk])
    first, again = (client.get(url, {"page": "99999"}) for _ in range(2))
    assert (first["X-Page-Cache"], again["X-Page-Cache"]) == ("miss", "miss")
    assert again.context["page"].number == 3


def test_an_existing_page_is_still_stored_and_served(
    client: Client, catalogue: Branch
) -> None:
    url = reverse("branch-books", args=[catalogue.pk])
    first, again = (client.get(url, {"page": 3}) for _ in range(2))
    assert first.context["page"].number == 3
    assert (first["X-Page-Cache"], again["X-Page-Cache"]) == ("miss", "hit")
