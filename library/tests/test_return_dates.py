"""Return dates lie between the loan's pickup and today: the service decides, the
form shows the range and the refusal beside the date."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from library.errors import LibraryError
from library.models import Book, Loan, Member
from library.services import loan_issue, loan_return

pytestmark = pytest.mark.django_db


def test_return_far_in_the_future_is_refused_and_the_loan_stays_open(
    book: Book, member: Member
) -> None:
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    with pytest.raises(LibraryError) as caught:
        loan_return(loan_id=loan.pk, return_date=datetime.date(9999, 12, 31))

    assert (caught.value.status, caught.value.code) == (400, "invalid")
    assert "9999-12-31 is in the future" in caught.value.message
    assert f"today, {timezone.localdate()}" in caught.value.message
    loan.refresh_from_db()
    book.refresh_from_db()
    assert loan.is_open
    assert book.on_shelf == 1


def test_return_tomorrow_is_refused_and_today_is_accepted(
    book: Book, member: Member
) -> None:
    today = timezone.localdate()
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    with pytest.raises(LibraryError):
        loan_return(loan_id=loan.pk, return_date=today + datetime.timedelta(days=1))
    returned = loan_return(loan_id=loan.pk, return_date=today)

    assert returned.return_date == today


def test_return_on_the_pickup_day_is_accepted(book: Book, member: Member) -> None:
    pickup = datetime.date(2025, 5, 10)
    loan = loan_issue(book_id=book.pk, member_id=member.pk, pickup_date=pickup)

    assert loan_return(loan_id=loan.pk, return_date=pickup).return_date == pickup


def test_refusal_before_pickup_names_the_earliest_date(
    book: Book, member: Member
) -> None:
    loan = loan_issue(
        book_id=book.pk, member_id=member.pk, pickup_date=datetime.date(2025, 5, 10)
    )

    with pytest.raises(LibraryError) as caught:
        loan_return(loan_id=loan.pk, return_date=datetime.date(2025, 5, 9))

    assert "the earliest return date is 2025-05-10" in caught.value.message


def test_form_shows_a_future_date_refusal_on_the_date_field(
    staff_client: Client, book: Book, member: Member
) -> None:
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    response = staff_client.post(
        reverse("loan-return", args=[loan.pk]), {"return_date": "9999-12-31"}
    )

    assert response.status_code == 400
    errors = response.context["form"].errors["return_date"]
    assert any("is in the future" in e for e in errors)
    assert not response.context["form"].non_field_errors()
    assert Loan.objects.get(pk=loan.pk).is_open


def test_form_offers_the_range_from_pickup_to_today(
    staff_client: Client, book: Book, member: Member
) -> None:
    pickup = datetime.date(2025, 5, 10)
    loan = loan_issue(book_id=book.pk, member_id=member.pk, pickup_date=pickup)

    response = staff_client.get(reverse("loan-return", args=[loan.pk]))

    html = response.content.decode()
    assert 'min="2025-05-10"' in html
    assert f'max="{timezone.localdate().isoformat()}"' in html
    assert "Between the pickup (10 May 2025) and today" in html
