"""Writes to the library. Each service owns its transaction and holds the invariants.

- A loan needs a copy on the shelf; two concurrent issues of the last copy cannot both
  succeed, because the shelf count is decremented by a conditional UPDATE whose row
  count tells who won (compare-and-set works the same on SQLite and PostgreSQL).
- A closed loan cannot be returned again, by the same compare-and-set on return_date.
- A return date lies between the loan's pickup and today (``loan_return``).
- Every change bumps the book's version and its branch's stock version, and appends
  an outbox message, all in the same transaction: the message exists exactly when the
  change does.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from library.errors import LibraryError, not_found
from library.models import Book, Branch, Loan, Member
from messaging.registry import LoanBody, MessageType, StockBody
from messaging.services import outbox_publish


def _today() -> datetime.date:
    return timezone.localdate()


@dataclass(frozen=True)
class _Shelf:
    """A changed book and its branch's shelf right after the change."""

    book: Book
    branch_version: int
    branch_total: int


def _shelf_changed(book_id: int) -> _Shelf:
    """Bump the branch's stock version; return the book and the branch's new shelf.

    Call inside ``atomic()`` right after the book's row was updated. The version
    and total read here are exactly the branch's state at that version: the bump
    locks the branch row, every change of the branch's books takes that lock before
    it commits, so the sum sees every earlier version's change and no later one.
    A message carries them, so a live page is told the state of *its* version,
    whenever the broadcast is delivered.
    """
    book = Book.objects.only("branch_id", "on_shelf", "version").get(pk=book_id)
    Branch.objects.filter(pk=book.branch_id).update(
        stock_version=F("stock_version") + 1
    )
    version, total = (
        Branch.objects.filter(pk=book.branch_id)
        .annotate(total=Sum("books__on_shelf"))
        .values_list("stock_version", "total")
        .get()
    )
    return _Shelf(book, int(version), int(total or 0))


def _loan_body(loan: Loan, shelf: _Shelf) -> LoanBody:
    return {
        "loan_id": loan.pk,
        "book_id": shelf.book.pk,
        "member_id": loan.member_id,
        "branch_id": shelf.book.branch_id,
        "on_shelf": shelf.book.on_shelf,
        "book_version": shelf.book.version,
        "branch_version": shelf.branch_version,
        "branch_total": shelf.branch_total,
    }


def loan_issue(
    *, book_id: int, member_id: int, pickup_date: datetime.date | None = None
) -> Loan:
    """Lend one copy of a book to a member and return the new loan."""
    with transaction.atomic():
        if not Member.objects.filter(pk=member_id).exists():
            raise not_found("Member", member_id)
        taken = Book.objects.filter(pk=book_id, on_shelf__gt=0).update(
            on_shelf=F("on_shelf") - 1,
            version=F("version") + 1,
            updated_at=timezone.now(),
        )
        if taken != 1:
            if not Book.objects.filter(pk=book_id).exists():
                raise not_found("Book", book_id)
            raise LibraryError(f"No copy of book #{book_id} is on the shelf.")
        shelf = _shelf_changed(book_id)
        loan = Loan.objects.create(
            book_id=book_id, member_id=member_id, pickup_date=pickup_date or _today()
        )
        outbox_publish(
            type=MessageType.LOAN_ISSUED,
            key=book_id,
            body=dict(_loan_body(loan, shelf)),
        )
        return loan


def loan_return(*, loan_id: int, return_date: datetime.date | None = None) -> Loan:
    """Close an open loan and put its copy back on the shelf.

    The return date lies between the pickup and today: a copy cannot come back
    before it left, nor on a day that has not come yet.
    """
    today = _today()
    day = return_date or today
    if day > today:
        raise LibraryError(
            f"A return on {day} is in the future: the latest return date is today, "
            f"{today}.",
            status=400,
            code="invalid",
        )
    with transaction.atomic():
        closed = Loan.objects.filter(pk=loan_id, return_date__isnull=True).update(
            return_date=day
        )
        if closed != 1:
            if not Loan.objects.filter(pk=loan_id).exists():
                raise not_found("Loan", loan_id)
            raise LibraryError(f"Loan #{loan_id} was already returned.")
        loan = Loan.objects.select_related("book", "member").get(pk=loan_id)
        if day < loan.pickup_date:
            # Rolls the whole transaction back: the loan stays open.
            raise LibraryError(
                f"A return on {day} would precede the pickup on {loan.pickup_date}: "
                f"the earliest return date is {loan.pickup_date}.",
                status=400,
                code="invalid",
            )
        Book.objects.filter(pk=loan.book_id).update(
            on_shelf=F("on_shelf") + 1,
            version=F("version") + 1,
            updated_at=timezone.now(),
        )
        shelf = _shelf_changed(loan.book_id)
        loan.book.refresh_from_db()
        outbox_publish(
            type=MessageType.RETURN_RECEIVED,
            key=loan.book_id,
            body=dict(_loan_body(loan, shelf)),
        )
        return loan


def stock_correct(*, book_id: int, on_shelf: int) -> Book:
    """Set a book's shelf count after a stock-take; refuse negative counts."""
    if on_shelf < 0:
        raise LibraryError(
            "A shelf count cannot be negative.", status=400, code="invalid"
        )
    with transaction.atomic():
        changed = Book.objects.filter(pk=book_id).update(
            on_shelf=on_shelf, version=F("version") + 1, updated_at=timezone.now()
        )
        if changed != 1:
            raise not_found("Book", book_id)
        shelf = _shelf_changed(book_id)
        body: StockBody = {
            "book_id": shelf.book.pk,
            "branch_id": shelf.book.branch_id,
            "on_shelf": shelf.book.on_shelf,
            "book_version": shelf.book.version,
            "branch_version": shelf.branch_version,
            "branch_total": shelf.branch_total,
        }
        outbox_publish(type=MessageType.STOCK_CORRECTED, key=book_id, body=dict(body))
        return Book.objects.get(pk=book_id)
