"""Catalogue pages, search and the stock list: cache-aside under a generation."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page

from library import selectors

# Tenants are looked up through their module (``specs.branch_tenant``), never bound
# at import, so a test that replaces them there reaches this code.
from library.cache.reads import specs
from library.cache.reads.rows import Absent, canonical_page_number, page_of_rows
from library.cache.reads.specs import LIST, LIST_JITTER_S, LIST_LIFETIME_S, SEARCH
from library.cache.store import cache_aside, generation_get
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


def branch_books_page(
    *, branch_id: int, query: str = "", page: selectors.PageNumber = 1
) -> tuple[Branch, Page[Book]] | None:
    """Return the branch and one page of its catalogue (searched when ``query``)."""
    spec = SEARCH if query else LIST
    tenant = specs.branch_tenant(branch_id)
    number = canonical_page_number(page)
    key = spec.key(
        tenant=tenant,
        generation=generation_get(spec.namespace, tenant),
        criteria={"q": query, "page": number},
    )
    try:
        value = cache_aside(
            key=key,
            namespace=spec.namespace,
            produce=lambda: _books_origin(branch_id, query, number),
            lifetime_s=LIST_LIFETIME_S,
            jitter_s=LIST_JITTER_S,
        )
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
