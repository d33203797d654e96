"""Reads of the library for the pages: each returns what one page needs in few queries.

Lists are annotated in SQL (one query, no per-row lookups); detail reads use
``select_related`` for the rows they show next to the main object. The loan desk's
searches are in ``desk`` and re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from django.core.paginator import Page, Paginator
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django_stubs_ext import WithAnnotations

from library.models import Book, Branch, Loan, Member

# The desk's searches, under the names the forms and views use (``selectors.X``).
from library.selectors.desk import (
    SEARCH_MAX_CHARS,
    SEARCH_MIN_CHARS,
    SUGGESTIONS,
    Found,
    Pick,
    book_label,
    book_pick,
    book_search,
    loan_label,
    member_label,
    member_pick,
    member_search,
    open_loan_pick,
    open_loan_search,
    record_number,
    search_terms,
    searchable,
)

BOOKS_PER_PAGE = 20
LOANS_PER_PAGE = 20
BUSIEST_BOOKS = 8

PageNumber = str | int | None


class _StockFields(TypedDict):
    shelf_total: int
    book_count: int
    open_loans: int


if TYPE_CHECKING:
    # Subscripting with two arguments only works for the type checker.
    BranchWithStock = WithAnnotations[Branch, _StockFields]
else:
    BranchWithStock = Branch


def _per_branch(rows: QuerySet[Book] | QuerySet[Loan], branch: str, total: Any) -> Any:
    """Return ``total`` over ``rows`` of the outer branch, as a subquery (0 if none).

    Every figure is a subquery of its own, with no join and no GROUP BY outside:
    joining loans beside books would multiply the rows and inflate the sums, and an
    outer GROUP BY on a join makes PostgreSQL group by the correlated subquery too,
    running it once per book (the home page took over 20 s on the caching
    benchmark's 3,300 books and 4,000 loans). Here each runs once per branch.
    """
    return Coalesce(
        Subquery(
            rows.filter(**{branch: OuterRef("pk")})
            .order_by()
            .values(branch)
            .annotate(n=total)
            .values("n"),
            output_field=IntegerField(),
        ),
        0,
    )


def branch_list_with_stock() -> QuerySet[BranchWithStock]:
    """Return every branch annotated with ``shelf_total``, ``book_count`` and
    ``open_loans``, in one query."""
    return Branch.objects.annotate(
        shelf_total=_per_branch(Book.objects.all(), "branch", Sum("on_shelf")),
        book_count=_per_branch(Book.objects.all(), "branch", Count("id")),
        open_loans=_per_branch(
            Loan.objects.filter(return_date__isnull=True), "book__branch", Count("id")
        ),
    ).order_by("id")


def branch_shelf_count(*, branch_id: int) -> int:
    """Return the copies on the shelf in a branch (the sum of its books' on_shelf)."""
    total = Book.objects.filter(branch_id=branch_id).aggregate(
        total=Coalesce(Sum("on_shelf"), 0)
    )["total"]
    return int(total)


@dataclass(frozen=True)
class BranchDetail:
    branch: BranchWithStock
    busiest_books: Sequence[Book]  # annotated with ``loan_count``


def branch_detail(
    *, branch_id: int, busiest: int = BUSIEST_BOOKS
) -> BranchDetail | None:
    """Return a branch with its stock figures and its most lent books, or None."""
    branch = branch_list_with_stock().filter(pk=branch_id).first()
    if branch is None:
        return None
    books = list(
        Book.objects.filter(branch_id=branch_id)
        .annotate(loan_count=Count("loans"))
        .order_by("-loan_count", "title", "id")[:busiest]
    )
    return BranchDetail(branch=branch, busiest_books=books)


def branch_get(*, branch_id: int) -> Branch | None:
    return Branch.objects.filter(pk=branch_id).first()


def branch_books_page(
    *, branch_id: int, query: str = "", page: PageNumber = 1
) -> Page[Book]:
    """Return one page of a branch's catalogue, filtered on title or author.

    The search is a case-insensitive "contains"; an out-of-range or malformed page
    number falls back to the nearest valid page (``Paginator.get_page``).
    """
    books = Book.objects.filter(branch_id=branch_id)
    if query:
        books = books.filter(Q(title__icontains=query) | Q(author__icontains=query))
    paginator = Paginator(books.order_by("title", "id"), BOOKS_PER_PAGE)
    return paginator.get_page(page)


@dataclass(frozen=True)
class BookDetail:
    book: Book  # with its branch
    open_loans: list[Loan]  # with their members; empty unless asked for


def book_detail(*, book_id: int, with_open_loans: bool = False) -> BookDetail | None:
    """Return a book with its branch and, when asked, its open loans; or None."""
    book = Book.objects.select_related("branch").filter(pk=book_id).first()
    if book is None:
        return None
    loans: list[Loan] = []
    if with_open_loans:
        loans = list(
            Loan.objects.filter(book_id=book_id, return_date__isnull=True)
            .select_related("member")
            .order_by("pickup_date", "id")
        )
    return BookDetail(book=book, open_loans=loans)


def member_get(*, member_id: int) -> Member | None:
    return Member.objects.filter(pk=member_id).first()


@dataclass(frozen=True)
class MemberHistory:
    member: Member
    loans: Page[Loan]  # with book and branch
    total: int
    open: int

    @property
    def returned(self) -> int:
        return self.total - self.open


def member_history_page(
    *, member_id: int, page: PageNumber = 1
) -> MemberHistory | None:
    """Return a member with one page of their loans (newest first) and loan counts."""
    member = member_get(member_id=member_id)
    if member is None:
        return None
    loans = Loan.objects.filter(member_id=member_id)
    counts = loans.aggregate(
        total=Count("id"), open=Count("id", filter=Q(return_date__isnull=True))
    )
    paginator = Paginator(
        loans.select_related("book", "book__branch").order_by("-pickup_date", "-id"),
        LOANS_PER_PAGE,
    )
    return MemberHistory(
        member=member,
        loans=paginator.get_page(page),
        total=counts["total"],
        open=counts["open"],
    )


def loan_get(*, loan_id: int) -> Loan | None:
    """Return a loan with its book, the book's branch and the member; or None."""
    return (
        Loan.objects.select_related("book", "book__branch", "member")
        .filter(pk=loan_id)
        .first()
    )


__all__ = [
    "BOOKS_PER_PAGE",
    "BUSIEST_BOOKS",
    "LOANS_PER_PAGE",
    "SEARCH_MAX_CHARS",
    "SEARCH_MIN_CHARS",
    "SUGGESTIONS",
    "BookDetail",
    "BranchDetail",
    "BranchWithStock",
    "Found",
    "MemberHistory",
    "PageNumber",
    "Pick",
    "book_detail",
    "book_label",
    "book_pick",
    "book_search",
    "branch_books_page",
    "branch_detail",
    "branch_get",
    "branch_list_with_stock",
    "branch_shelf_count",
    "loan_get",
    "loan_label",
    "member_get",
    "member_history_page",
    "member_label",
    "member_pick",
    "member_search",
    "open_loan_pick",
    "open_loan_search",
    "record_number",
    "search_terms",
    "searchable",
]
