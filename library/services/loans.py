"""Writes to the library. Each service owns its transaction and holds the invariants.

- A loan needs a copy on the shelf; two concurrent issues of the last copy cannot both
  succeed, because the shelf count is decremented by a conditional UPDATE whose row
  count tells who won (compare-and-set works the same on SQLite and PostgreSQL).
- A closed loan cannot be returned again, by the same compare-and-set on return_date.
- A return date lies between the loan's pickup and today (``loan_return``).
- Every change bumps the book's version and its branch's stock version, and appends
  an outbox message, all in the same transaction: the message exists exactly when the
  change does.
- A desk form sent twice changes the library once (``loan_issue_once``,
  ``loan_return_once``): its idempotency key is stored on the loan, in a unique
  column, in the transaction of the change. A repeat finds the loan and answers with
  it; two copies racing each other cannot both commit, and the loser answers with
  the winner's loan.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from functools import partial

from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from library.cache import reads
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
    book = Book.objects.only("branch_id", "on_shelf", "version", "updated_at").get(
        pk=book_id
    )
    version_announce_on_commit(book)
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


def version_announce_on_commit(book: Book) -> None:
    """Have the book's version record name this change once it commits.

    Call inside ``atomic()`` with the book as the change left it (version and
    ``updated_at``). The page tier keys a book page by the record, so the record is
    written before the change's answer goes out: the next request, on any server,
    asks for the new page (``library.cache.reads.versions``).
    """
    transaction.on_commit(
        partial(
            reads.book_version_announce,
            book_id=book.pk,
            branch_id=book.branch_id,
            version=book.version,
            updated_at=book.updated_at,
        )
    )


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


@dataclass(frozen=True)
class Once:
    """What a keyed desk submission did: its loan, and whether an earlier copy of
    the same submission had already done it (then this one changed nothing)."""

    loan: Loan
    replayed: bool


def loan_issue(
    *,
    book_id: int,
    member_id: int,
    pickup_date: datetime.date | None = None,
    key: str | None = None,
) -> Loan:
    """Lend one copy of a book to a member and return the new loan.

    ``key`` is stored as the loan's ``issue_key``; use ``loan_issue_once`` to
    have a repeated key answered with its loan instead of an error.
    """
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
            book_id=book_id,
            member_id=member_id,
            pickup_date=pickup_date or _today(),
            issue_key=key,
        )
        outbox_publish(
            type=MessageType.LOAN_ISSUED,
            key=book_id,
            body=dict(_loan_body(loan, shelf)),
        )
        return loan


def loan_issue_once(
    *,
    key: str,
    book_id: int,
    member_id: int,
    pickup_date: datetime.date | None = None,
) -> Once:
    """Issue the loan a desk form asks for, unless that form was already answered.

    The form's ``key`` was rendered with it. If a loan carries it, this is the same
    submission again (a clerk's retry after a lost answer, a double click): answer
    with that loan and change nothing. If another copy commits while this one runs,
    this one fails (the unique key, or the shelf it emptied) and answers with that
    copy's loan. A key that issued a loan of another book or member is refused: the
    form was reused for a different loan.
    """
    first = _issued_with(key, book_id=book_id, member_id=member_id)
    if first is not None:
        return Once(first, replayed=True)
    try:
        loan = loan_issue(
            book_id=book_id, member_id=member_id, pickup_date=pickup_date, key=key
        )
    except (IntegrityError, LibraryError):
        first = _issued_with(key, book_id=book_id, member_id=member_id)
        if first is None:
            raise
        return Once(first, replayed=True)
    return Once(loan, replayed=False)


def _issued_with(key: str, *, book_id: int, member_id: int) -> Loan | None:
    loan = Loan.objects.select_related("book", "member").filter(issue_key=key).first()
    if loan is not None and (loan.book_id, loan.member_id) != (book_id, member_id):
        raise LibraryError(
            f"This form was already used to issue loan #{loan.pk}; open the form "
            "again to issue another loan."
        )
    return loan


def loan_return(
    *,
    loan_id: int,
    return_date: datetime.date | None = None,
    key: str | None = None,
) -> Loan:
    """Close an open loan and put its copy back on the shelf.

    The return date lies between the pickup and today: a copy cannot come back
    before it left, nor on a day that has not come yet. ``key`` is stored as the
    loan's ``return_key`` (see ``loan_return_once``).
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
            return_date=day, return_key=key
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


def loan_return_once(
    *, key: str, loan_id: int, return_date: datetime.date | None = None
) -> Once:
    """Return the loan a desk form names, unless that form was already answered.

    As ``loan_issue_once``: a loan closed with ``key`` is this submission's answer
    (the date it was closed with stands), and a copy that loses the race to close
    the loan answers with the winner's result instead of "already returned".
    """
    first = _returned_with(key, loan_id=loan_id)
    if first is not None:
        return Once(first, replayed=True)
    try:
        loan = loan_return(loan_id=loan_id, return_date=return_date, key=key)
    except (IntegrityError, LibraryError):
        first = _returned_with(key, loan_id=loan_id)
        if first is None:
            raise
        return Once(first, replayed=True)
    return Once(loan, replayed=False)


def _returned_with(key: str, *, loan_id: int) -> Loan | None:
    loan = Loan.objects.select_related("book", "member").filter(return_key=key).first()
    if loan is not None and loan.pk != loan_id:
        raise LibraryError(
            f"This form was already used to return loan #{loan.pk}; open the "
            "return page of this loan again."
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
