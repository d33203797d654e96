"""The live pages' read of a branch's shelf: what a snapshot and an update carry."""

from __future__ import annotations

from typing import Any

from library.models import Book, Branch


def branch_stock_state(branch_id: int) -> dict[str, Any]:
    """Return the branch's live shelf state: version, total and per-book counts."""
    branch = Branch.objects.only("stock_version").get(pk=branch_id)
    books = list(
        Book.objects.filter(branch_id=branch_id)
        .order_by("id")
        .values_list("id", "on_shelf")
    )
    return {
        "branch": branch_id,
        "version": branch.stock_version,
        "total": sum(n for _, n in books),
        "books": {str(pk): n for pk, n in books},
    }
