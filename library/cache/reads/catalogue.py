"""Catalogue pages, search and the stock list: cache-aside under a generation."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page

from library import selectors
from library.cache.metrics import redis_usable

# Tenants are looked up through their module (``specs.branch_tenant``), never bound
# at import, so a test that replaces them there reaches this code.
from library.cache.reads import specs
from library.cache.reads.rows import (
    Absent,
    canonical_page_number,
    last_page_number,
    page_of_rows,
    search_canonical,
)
from library.cache.reads.specs import LIST, LIST_JITTER_S, LIST_LIFETIME_S, SEARCH
from library.cache.store import cache_aside, cache_enabled, generation_get
from library.models import Book, Branch


def _books_origin(branch_id: int, query: str, number: int) -> dict[str, Any]:
    branch = selectors.branch_get(branch_id=branch_id)
    if branch is None:
        raise Absent
    page = selectors.branch_books_page(branch_id=branch_id, query=query, page=number)
    return {
        "branch": {"id": branch.pk, "name": branch.name, "city": branch.city},
        "count": page.paginator.count,
        "number": page.number,
        "rows": [
            {
                "id": b.pk,
                "title": b.title,
                "author": b.author,
                "publication_year": b.publication_year,
                "on_shelf": b.on_shelf,
            }
            for b in page.object_list
        ],
    }


def _books_value(
    branch_id: int, query: str, number: int, generation: int
) -> dict[str, Any]:
    spec = SEARCH if query else LIST
    key = spec.key(
        tenant=specs.branch_tenant(branch_id),
        generation=generation,
        criteria={"q": query, "page": number},
    )
    return cache_aside(
        key=key,
        namespace=spec.namespace,
        produce=lambda: _books_origin(branch_id, query, number),
        lifetime_s=LIST_LIFETIME_S,
        jitter_s=LIST_JITTER_S,
    )


def branch_books_page(
    *, branch_id: int, query: str = "", page: selectors.PageNumber = 1
) -> tuple[Branch, Page[Book]] | None:
    """Return the branch and one page of its catalogue (searched when ``query``).

    Keys are canonical, so no spelling of a question makes an entry of its own: the
    search in its ASCII lower case (the origin finds the same books), and a number
    past the last page as the last page. The last page is known from the first
    page's entry (its count, the same generation), read before any later page:
    keyed by the number asked, every ``?page=N`` would keep its own copy of the
    last page. Without the cache nothing is keyed, and the first page is not read.
    """
    query = search_canonical(query)
    spec = SEARCH if query else LIST
    generation = generation_get(spec.namespace, specs.branch_tenant(branch_id))
    number = canonical_page_number(page)
    try:
        if number > 1 and cache_enabled() and redis_usable():
            first = _books_value(branch_id, query, 1, generation)
            last = last_page_number(first["count"], selectors.BOOKS_PER_PAGE)
            number = min(number, last)
        value = _books_value(branch_id, query, number, generation)
    except Absent:
        return None
    branch = Branch(**value["branch"])
    rows = [Book(branch_id=branch.pk, **row) for row in value["rows"]]
    per_page = selectors.BOOKS_PER_PAGE
    return branch, page_of_rows(rows, value["count"], value["number"], per_page)


def _stock_list_origin(branch_id: int) -> dict[str, Any]:
    branch = selectors.branch_get(branch_id=branch_id)
    if branch is None:
        raise Absent
    books = list(
        Book.objects.filter(branch_id=branch_id)
        .order_by("title", "id")
        .values("id", "title", "author", "on_shelf")
    )
    return {
        "branch": branch.pk,
        "name": branch.name,
        "titles": len(books),
        "on_shelf": sum(b["on_shelf"] for b in books),
        "books": books,
    }


def branch_stock_list(*, branch_id: int) -> dict[str, Any] | None:
    """Return every book of a branch with its shelf count (the JSON stock list).

    The whole list is one entry under the branch's list generation, so the change
    that retires the catalogue pages retires it too.
    """
    tenant = specs.branch_tenant(branch_id)
    key = LIST.key(
        tenant=tenant,
        generation=generation_get(LIST.namespace, tenant),
        criteria={"all": 1},
    )
    try:
        value: dict[str, Any] = cache_aside(
            key=key,
            namespace=LIST.namespace,
            produce=lambda: _stock_list_origin(branch_id),
            lifetime_s=LIST_LIFETIME_S,
            jitter_s=LIST_JITTER_S,
        )
    except Absent:
        return None
    return value
