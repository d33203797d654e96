"""The branch page and the library's overview: stale-while-revalidate.

A branch's page is retired on change; the overview (every branch) only ages.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings

from library import selectors

# Tenants are looked up through their module (``specs.branch_tenant``), never bound
# at import, so a test that replaces them there reaches this code.
from library.cache.reads import specs
from library.cache.reads.rows import Absent
from library.cache.reads.specs import STOCK, STOCK_STALE_S
from library.cache.store import stale_while_revalidate
from library.models import Book, Branch


@dataclass(frozen=True)
class BranchPage:
    branch: Branch  # with shelf_total, book_count and open_loans set
    busiest_books: list[Book]  # with loan_count set


def _branch_row(b: selectors.BranchWithStock) -> dict[str, Any]:
    return {
        "id": b.pk,
        "name": b.name,
        "city": b.city,
        "shelf_total": b.shelf_total,
        "book_count": b.book_count,
        "open_loans": b.open_loans,
    }


def _branch_of(fields: dict[str, Any]) -> selectors.BranchWithStock:
    branch = Branch(id=fields["id"], name=fields["name"], city=fields["city"])
    branch.shelf_total = fields["shelf_total"]  # type: ignore[attr-defined]
    branch.book_count = fields["book_count"]  # type: ignore[attr-defined]
    branch.open_loans = fields["open_loans"]  # type: ignore[attr-defined]
    # The three annotations are set above: the row is what the selector returns.
    return cast("selectors.BranchWithStock", branch)


def _branch_origin(branch_id: int) -> dict[str, Any]:
    detail = selectors.branch_detail(branch_id=branch_id)
    if detail is None:
        raise Absent
    return {
        "branch": _branch_row(detail.branch),
        "busiest": [
            {
                "id": book.pk,
                "title": book.title,
                "author": book.author,
                "on_shelf": book.on_shelf,
                "loan_count": book.loan_count,  # type: ignore[attr-defined]
            }
            for book in detail.busiest_books
        ],
    }


def branch_key(branch_id: int) -> str:
    return STOCK.key(tenant=specs.branch_tenant(branch_id))


def branch_page(*, branch_id: int) -> BranchPage | None:
    """Return a branch's stock figures and busiest books, at most seconds old."""
    try:
        value, _ = stale_while_revalidate(
            key=branch_key(branch_id),
            namespace=STOCK.namespace,
            produce=lambda: _branch_origin(branch_id),
            fresh_s=settings.CACHE_STOCK_FRESH_S,
            stale_s=STOCK_STALE_S,
        )
    except Absent:
        return None
    branch = _branch_of(value["branch"])
    busiest = []
    for row in value["busiest"]:
        book = Book(
            id=row["id"],
            title=row["title"],
            author=row["author"],
            on_shelf=row["on_shelf"],
            branch_id=branch.pk,
        )
        book.loan_count = row["loan_count"]  # type: ignore[attr-defined]
        busiest.append(book)
    return BranchPage(branch=branch, busiest_books=busiest)


def _overview_origin() -> list[dict[str, Any]]:
    return [_branch_row(b) for b in selectors.branch_list_with_stock()]


def overview_key() -> str:
    return STOCK.key(tenant=specs.library_tenant(), criteria={"view": "overview"})


def library_overview(
    *, clock: Callable[[], float] = time.time
) -> list[selectors.BranchWithStock]:
    """Return every branch with its stock figures, at most seconds old.

    The home page's figures add up every branch, so no single loan's event retires
    them (a busy library would rebuild them on every loan): they are served
    stale-while-revalidate like a branch's, fresh for ``CACHE_STOCK_FRESH_S``.
    """
    rows, _ = stale_while_revalidate(
        key=overview_key(),
        namespace=STOCK.namespace,
        produce=_overview_origin,
        fresh_s=settings.CACHE_STOCK_FRESH_S,
        stale_s=STOCK_STALE_S,
        clock=clock,
    )
    return [_branch_of(fields) for fields in rows]
