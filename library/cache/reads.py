"""The cached reads of the library's pages: each wraps one origin selector.

What is cached where (every key comes from ``KeySpec``; the tenant is the branch,
or the member for a member's own history):

========== =============================== ======================= =================
namespace  key                             strategy                lifetime
========== =============================== ======================= =================
book       book:s1:g1:tbranch-B:detail:    cache-aside, local tier 1 h + [0, 10 min)
           id=N&u=<updated µs>&v=<ver>     2 s, single-flight      jitter, 24 h cap
stock      stock:s1:g1:tbranch-B:branch    stale-while-revalidate  5 s fresh +
                                           retired by              30 s stale
                                           cache_invalidation
list       list:s1:gG:tbranch-B:books:     cache-aside, generation 120 s + [0, 30 s)
           page=P                          bumped on every change
search     search:s1:gG:tbranch-B:books:   as list                 as list
           page=P&q=<text>
history    history:s1:gG:tmember-M:loans:  cache-aside, generation 300 s + [0, 60 s)
           member=M&page=P                 per member
========== =============================== ======================= =================

Why the book's key reads its version from the database (one primary-key lookup of
three columns) instead of a small version cache: the version is bumped in the same
transaction as the change, so the lookup can never be stale, and it needs no
invalidation of its own (a version cache would be one more entry that an event has
to reach). ``updated_at`` joins the version in the key because a re-created database
(a restore, a re-seed) starts versions again at 1 while its rows are new; the two
together never meet an older entry. Since the key names the exact version, a stale
entry can never be served, which is also why the in-process tier is safe here.

Values are JSON (see ``library.cache.store``) and are turned back into unsaved model
instances and ``Page`` objects, so the templates read them like the origin's rows.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict, overload

from django.core.paginator import Page, Paginator

from library import selectors
from library.cache.keys import KeySpec
from library.cache.store import (
    cache_aside,
    generation_get,
    generations_bump,
    stale_while_revalidate,
)
from library.models import Book, Branch, Loan, Member

__all__ = [
    "BOOK",
    "HISTORY",
    "LIST",
    "SEARCH",
    "STOCK",
    "BranchPage",
    "CachedBook",
    "book_detail",
    "branch_books_page",
    "branch_page",
    "branch_stock_list",
    "branch_tenant",
    "change_invalidate",
    "member_history_page",
    "member_tenant",
]

BOOK: Final = KeySpec(namespace="book", operation="detail")
STOCK: Final = KeySpec(namespace="stock", operation="branch")
LIST: Final = KeySpec(namespace="list", operation="books")
SEARCH: Final = KeySpec(namespace="search", operation="books")
HISTORY: Final = KeySpec(namespace="history", operation="loans")

BOOK_LIFETIME_S: Final = 60 * 60
BOOK_JITTER_S: Final = 10 * 60
BOOK_LOCAL_S: Final = 2.0
STOCK_FRESH_S: Final = 5.0
STOCK_STALE_S: Final = 30.0
# The generation retires list pages at once; the lifetime only bounds how long a
# change that published no event (an admin edit of a title) stays invisible.
LIST_LIFETIME_S: Final = 120
LIST_JITTER_S: Final = 30
HISTORY_LIFETIME_S: Final = 300
HISTORY_JITTER_S: Final = 60


class _Absent(Exception):
    """The origin has no such row: nothing is stored, the caller answers None."""


def branch_tenant(branch_id: int) -> str:
    """Return the tenant of everything that belongs to one branch."""
    return f"branch-{branch_id}"


def member_tenant(member_id: int) -> str:
    """Return the tenant of one member's own data (never shared with another)."""
    return f"member-{member_id}"


def _page_number(raw: selectors.PageNumber) -> int:
    # Canonical before it reaches the key: "01", "1" and a missing page are one page,
    # and garbage is page 1 (as Paginator.get_page would answer anyway).
    try:
        number = int(raw or 1)
    except (TypeError, ValueError):
        return 1
    return max(number, 1)


def _iso(moment: datetime.datetime | datetime.date | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _datetime(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def _date(text: str | None) -> datetime.date | None:
    return None if text is None else datetime.date.fromisoformat(text)


class _Rows(Sequence[Any]):
    """The cached rows of one page, posing as the whole list for ``Paginator``.

    ``Paginator`` only asks for the length and for the slice of the page it builds,
    which is exactly the cached rows.
    """

    def __init__(self, rows: list[Any], count: int) -> None:
        self._rows = rows
        self._count = count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._rows
        raise IndexError("only the cached page can be read")


def _page(rows: list[Any], count: int, number: int, per_page: int) -> Page[Any]:
    paginator = Paginator(_Rows(rows, count), per_page)
    return paginator.page(number) if count else paginator.get_page(1)


# --- book (cache-aside, versioned key) ------------------------------------------------


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


def _book_origin(book_id: int) -> _BookValue:
    detail = selectors.book_detail(book_id=book_id)
    if detail is None:
        raise _Absent
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
    key = BOOK.key(
        tenant=branch_tenant(branch_id),
        criteria={
            "id": book_id,
            "v": version,
            "u": int(updated_at.timestamp() * 1_000_000),
        },
    )
    try:
        value: _BookValue = cache_aside(
            key=key,
            namespace=BOOK.namespace,
            produce=lambda: _book_origin(book_id),
            lifetime_s=BOOK_LIFETIME_S,
            jitter_s=BOOK_JITTER_S,
            local_s=BOOK_LOCAL_S,
        )
    except _Absent:  # deleted between the version read and the origin read
        return None
    branch = Branch(**value["branch"])
    book = Book(
        id=value["id"],
        title=value["title"],
        author=value["author"],
        publication_year=value["publication_year"],
        on_shelf=value["on_shelf"],
        version=value["version"],
        updated_at=_datetime(value["updated_at"]),
        branch=branch,
    )
    return CachedBook(book=book, open_loans=[])


# --- branch page (stale-while-revalidate, retired on change) ----------------------


@dataclass(frozen=True)
class BranchPage:
    branch: Branch  # with shelf_total, book_count and open_loans set
    busiest_books: list[Book]  # with loan_count set


def _branch_origin(branch_id: int) -> dict[str, Any]:
    detail = selectors.branch_detail(branch_id=branch_id)
    if detail is None:
        raise _Absent
    b = detail.branch
    return {
        "branch": {
            "id": b.pk,
            "name": b.name,
            "city": b.city,
            "shelf_total": b.shelf_total,
            "book_count": b.book_count,
            "open_loans": b.open_loans,
        },
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


def _branch_key(branch_id: int) -> str:
    return STOCK.key(tenant=branch_tenant(branch_id))


def branch_page(*, branch_id: int) -> BranchPage | None:
    """Return a branch's stock figures and busiest books, at most seconds old."""
    try:
        value, _ = stale_while_revalidate(
            key=_branch_key(branch_id),
            namespace=STOCK.namespace,
            produce=lambda: _branch_origin(branch_id),
            fresh_s=STOCK_FRESH_S,
            stale_s=STOCK_STALE_S,
        )
    except _Absent:
        return None
    fields = value["branch"]
    branch = Branch(id=fields["id"], name=fields["name"], city=fields["city"])
    branch.shelf_total = fields["shelf_total"]  # type: ignore[attr-defined]
    branch.book_count = fields["book_count"]  # type: ignore[attr-defined]
    branch.open_loans = fields["open_loans"]  # type: ignore[attr-defined]
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


# --- catalogue pages and search (cache-aside under a generation) ----------------------


def _books_origin(branch_id: int, query: str, number: int) -> dict[str, Any]:
    branch = selectors.branch_get(branch_id=branch_id)
    if branch is None:
        raise _Absent
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
    tenant = branch_tenant(branch_id)
    number = _page_number(page)
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
    except _Absent:
        return None
    branch = Branch(**value["branch"])
    rows = [Book(branch_id=branch.pk, **row) for row in value["rows"]]
    per_page = selectors.BOOKS_PER_PAGE
    return branch, _page(rows, value["count"], value["number"], per_page)


def _stock_list_origin(branch_id: int) -> dict[str, Any]:
    branch = selectors.branch_get(branch_id=branch_id)
    if branch is None:
        raise _Absent
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
    tenant = branch_tenant(branch_id)
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
    except _Absent:
        return None
    return value


# --- a member's own history (cache-aside under the member's generation) ---------------


def _history_origin(member_id: int, number: int) -> dict[str, Any]:
    history = selectors.member_history_page(member_id=member_id, page=number)
    if history is None:
        raise _Absent
    m = history.member
    return {
        "member": {
            "id": m.pk,
            "first_name": m.first_name,
            "last_name": m.last_name,
            "email": m.email,
            "registered_at": _iso(m.registered_at),
            "user_id": m.user_id,
        },
        "total": history.total,
        "open": history.open,
        "count": history.loans.paginator.count,
        "number": history.loans.number,
        "rows": [
            {
                "id": loan.pk,
                "pickup_date": _iso(loan.pickup_date),
                "return_date": _iso(loan.return_date),
                "book": {
                    "id": loan.book.pk,
                    "title": loan.book.title,
                    "author": loan.book.author,
                    "branch": {
                        "id": loan.book.branch.pk,
                        "name": loan.book.branch.name,
                        "city": loan.book.branch.city,
                    },
                },
            }
            for loan in history.loans.object_list
        ],
    }


def _loan(row: dict[str, Any], member: Member) -> Loan:
    book_row = row["book"]
    book = Book(
        id=book_row["id"],
        title=book_row["title"],
        author=book_row["author"],
        branch=Branch(**book_row["branch"]),
    )
    return Loan(
        id=row["id"],
        book=book,
        member=member,
        pickup_date=datetime.date.fromisoformat(row["pickup_date"]),
        return_date=_date(row["return_date"]),
    )


def member_history_page(
    *, member_id: int, page: selectors.PageNumber = 1
) -> selectors.MemberHistory | None:
    """Return one member's history page; the key names the member, always.

    The entry is only ever read under the member's own tenant; whether the caller
    may see it is the view's decision, taken on the returned ``member.user_id``.
    """
    tenant = member_tenant(member_id)
    number = _page_number(page)
    key = HISTORY.key(
        tenant=tenant,
        generation=generation_get(HISTORY.namespace, tenant),
        criteria={"member": member_id, "page": number},
    )
    try:
        value = cache_aside(
            key=key,
            namespace=HISTORY.namespace,
            produce=lambda: _history_origin(member_id, number),
            lifetime_s=HISTORY_LIFETIME_S,
            jitter_s=HISTORY_JITTER_S,
        )
    except _Absent:
        return None
    fields = dict(value["member"])
    fields["registered_at"] = _date(fields["registered_at"])
    member = Member(**fields)
    rows = [_loan(row, member) for row in value["rows"]]
    return selectors.MemberHistory(
        member=member,
        loans=_page(rows, value["count"], value["number"], selectors.LOANS_PER_PAGE),
        total=value["total"],
        open=value["open"],
    )


# --- invalidation (called by the cache_invalidation subscription) ---------------------


def change_invalidate(branch_id: int, member_id: int | None = None) -> None:
    """Retire what a change at the branch made stale, in one Redis round trip.

    The branch's list and search generations are bumped and its stock page deleted;
    with a member, that member's history generation too. Raises on a Redis error, so
    the caller's delivery is retried.

    The stock page is deleted, not written through: rebuilding it (totals and the
    busiest books over all loans) on every loan made a burst of loans rebuild it once
    per loan inside the drain, which the outbox benchmark measured as a large share
    of the drain's time; the next reader rebuilds it once, behind single-flight.
    """
    tenant = branch_tenant(branch_id)
    generations = [(LIST.namespace, tenant), (SEARCH.namespace, tenant)]
    if member_id is not None:
        generations.append((HISTORY.namespace, member_tenant(member_id)))
    generations_bump(generations, delete=(_branch_key(branch_id),))
