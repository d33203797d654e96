"""The book page: cache-aside under a versioned key, with the local tier.

A book an operator marked hot (``library.cache.hot``) is read stale-while-revalidate
under a key of its own instead, so its expiry never stalls its readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from library import selectors

# Tenants are looked up through their module (``specs.branch_tenant``), never bound
# at import, so a test that replaces them there reaches this code.
from library.cache.hot import HOT_STALE_S, book_is_hot
from library.cache.reads import specs
from library.cache.reads.rows import Absent, parse_datetime
from library.cache.reads.specs import BOOK, BOOK_JITTER_S, BOOK_LIFETIME_S, BOOK_LOCAL_S
from library.cache.store import cache_aside, stale_while_revalidate
from library.models import Book, Branch, Loan


class _BranchValue(TypedDict):
    id: int
    name: str
    city: str


class _BookValue(TypedDict):
    id: int
    title: str
    author: str
    publication_year: int | None
    on_shelf: int
    version: int
    updated_at: str
    branch: _BranchValue


@dataclass(frozen=True)
class CachedBook:
    book: Book  # unsaved instance with its branch, for the template
    open_loans: list[Loan]  # always empty: the staff's loan list is not cached


def book_origin(book_id: int) -> _BookValue:
    detail = selectors.book_detail(book_id=book_id)
    if detail is None:
        raise Absent
    book = detail.book
    return {
        "id": book.pk,
        "title": book.title,
        "author": book.author,
        "publication_year": book.publication_year,
        "on_shelf": book.on_shelf,
        "version": book.version,
        "updated_at": book.updated_at.isoformat(),
        "branch": {
            "id": book.branch.pk,
            "name": book.branch.name,
            "city": book.branch.city,
        },
    }


def book_detail(*, book_id: int) -> CachedBook | None:
    """Return the public view of a book (no loans) through the cache, or None."""
    current = (
        Book.objects.filter(pk=book_id)
        .values_list("branch_id", "version", "updated_at")
        .first()
    )
    if current is None:
        return None
    branch_id, version, updated_at = current
    criteria = {
        "id": book_id,
        "v": version,
        "u": int(updated_at.timestamp() * 1_000_000),
    }
    hot = book_is_hot(book_id)
    if hot:
        criteria["hot"] = 1  # another stored form (an envelope): another key
    key = BOOK.key(tenant=specs.branch_tenant(branch_id), criteria=criteria)
    try:
        value = _book_value(key, book_id, hot=hot)
    except Absent:  # deleted between the version read and the origin read
        return None
    branch = Branch(**value["branch"])
    book = Book(
        id=value["id"],
        title=value["title"],
        author=value["author"],
        publication_year=value["publication_year"],
        on_shelf=value["on_shelf"],
        version=value["version"],
        updated_at=parse_datetime(value["updated_at"]),
        branch=branch,
    )
    return CachedBook(book=book, open_loans=[])


def _book_value(key: str, book_id: int, *, hot: bool) -> _BookValue:
    if hot:
        value, _ = stale_while_revalidate(
            key=key,
            namespace=BOOK.namespace,
            produce=lambda: book_origin(book_id),
            fresh_s=BOOK_LIFETIME_S,
            stale_s=HOT_STALE_S,
        )
        return value
    return cache_aside(
        key=key,
        namespace=BOOK.namespace,
        produce=lambda: book_origin(book_id),
        lifetime_s=BOOK_LIFETIME_S,
        jitter_s=BOOK_JITTER_S,
        local_s=BOOK_LOCAL_S,
    )
