"""The loan services hold the shelf invariants, also under concurrency."""

from __future__ import annotations

import datetime
import threading

import pytest
from django.db import connection

from library.errors import LibraryError
from library.models import Book, Branch, Loan, Member
from library.services import loan_issue, loan_return, stock_correct

pytestmark = pytest.mark.django_db


def test_issue_takes_a_copy_off_the_shelf_and_bumps_version(book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    book.refresh_from_db()
    assert (book.on_shelf, book.version) == (1, 2)
    assert loan.is_open
    assert (loan.book_id, loan.member_id) == (book.pk, member.pk)
    assert Loan.objects.filter(book=book, return_date__isnull=True).count() == 1


def test_issue_without_a_copy_on_the_shelf_is_409_and_writes_nothing(book, member):
    Book.objects.filter(pk=book.pk).update(on_shelf=0)

    with pytest.raises(LibraryError) as caught:
        loan_issue(book_id=book.pk, member_id=member.pk)

    assert caught.value.status == 409
    assert "No copy" in caught.value.message
    book.refresh_from_db()
    assert (book.on_shelf, book.version) == (0, 1)
    assert not Loan.objects.exists()


def test_issue_of_an_unknown_book_is_404(member):
    with pytest.raises(LibraryError) as caught:
        loan_issue(book_id=999_999, member_id=member.pk)
    assert caught.value.status == 404
    assert "Book #999999" in caught.value.message


def test_issue_to_an_unknown_member_is_404_and_keeps_the_copy(book):
    with pytest.raises(LibraryError) as caught:
        loan_issue(book_id=book.pk, member_id=999_999)
    assert caught.value.status == 404
    assert "Member #999999" in caught.value.message
    book.refresh_from_db()
    assert (book.on_shelf, book.version) == (2, 1)


def test_return_closes_the_loan_and_puts_the_copy_back(book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    returned = loan_return(loan_id=loan.pk)

    loan.refresh_from_db()
    book.refresh_from_db()
    assert loan.return_date == returned.return_date is not None
    assert (book.on_shelf, book.version) == (2, 3)
    assert returned.book.on_shelf == 2


def test_second_return_is_409_and_does_not_add_a_copy(book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    loan_return(loan_id=loan.pk)

    with pytest.raises(LibraryError) as caught:
        loan_return(loan_id=loan.pk)

    assert caught.value.status == 409
    book.refresh_from_db()
    assert book.on_shelf == 2


def test_return_of_an_unknown_loan_is_404():
    with pytest.raises(LibraryError) as caught:
        loan_return(loan_id=999_999)
    assert caught.value.status == 404


def test_return_before_pickup_is_400_and_the_loan_stays_open(book, member):
    loan = loan_issue(
        book_id=book.pk, member_id=member.pk, pickup_date=datetime.date(2025, 5, 10)
    )

    with pytest.raises(LibraryError) as caught:
        loan_return(loan_id=loan.pk, return_date=datetime.date(2025, 5, 9))

    assert caught.value.status == 400
    loan.refresh_from_db()
    book.refresh_from_db()
    assert loan.is_open
    assert book.on_shelf == 1


def test_stock_correct_sets_the_count_and_refuses_negatives(book):
    assert stock_correct(book_id=book.pk, on_shelf=7).on_shelf == 7
    with pytest.raises(LibraryError) as caught:
        stock_correct(book_id=book.pk, on_shelf=-1)
    assert caught.value.status == 400


@pytest.mark.django_db(transaction=True)
def test_concurrent_issues_of_the_last_copy_cannot_both_succeed():
    branch = Branch.objects.create(name="Konak", city="Izmir")
    book = Book.objects.create(title="Last", author="Copy", branch=branch, on_shelf=1)
    members = [
        Member.objects.create(
            first_name=f"M{i}", last_name="T", registered_at=datetime.date(2024, 1, 1)
        )
        for i in range(6)
    ]
    start = threading.Barrier(len(members))
    outcomes: list[str] = []
    lock = threading.Lock()

    def borrow(member_id: int) -> None:
        try:
            start.wait(timeout=10)
            loan_issue(book_id=book.pk, member_id=member_id)
            outcome = "issued"
        except LibraryError as error:
            outcome = f"refused {error.status}"
        except Exception as error:  # a crash must fail the test, not vanish
            outcome = f"crashed {error!r}"
        finally:
            # Each thread has its own connection; close it so the test database
            # can be flushed and dropped.
            connection.close()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=borrow, args=(m.pk,)) for m in members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes) == ["issued"] + ["refused 409"] * (len(members) - 1)
    assert Loan.objects.filter(book=book).count() == 1
    book.refresh_from_db()
    assert (book.on_shelf, book.version) == (0, 2)
