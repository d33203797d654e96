"""The loan desk needs its permissions: being staff opens the admin, nothing more."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from library.models import Book, Loan, Member
from library.permissions import (
    ISSUE_LOAN,
    NAMED,
    RETURN_LOAN,
    permission_get,
    user_may,
)
from library.seed import STAFF_USERNAME, seed_library
from library.services import loan_issue
from tests.people import DESK_PASSWORD

pytestmark = pytest.mark.django_db


def desk_client(*perms: str) -> tuple[User, Client]:
    user = get_user_model().objects.create_user(
        "clerk", password=DESK_PASSWORD, is_staff=True
    )
    user.user_permissions.add(*(permission_get(perm) for perm in perms))
    client = Client()
    client.force_login(user)
    return user, client


def test_staff_without_the_permission_cannot_issue_a_loan(book: Book, member: Member):
    _, client = desk_client(RETURN_LOAN)
    url = reverse("loan-issue")
    assert client.get(url).status_code == 403
    response = client.post(url, {"book_id": book.pk, "member_id": member.pk})
    assert response.status_code == 403
    assert not Loan.objects.exists()
    book.refresh_from_db()
    assert book.on_shelf == 2


def test_staff_with_the_permission_issues_a_loan(book: Book, member: Member):
    _, client = desk_client(ISSUE_LOAN)
    response = client.post(
        reverse("loan-issue"), {"book_id": book.pk, "member_id": member.pk}
    )
    assert response.status_code == 303
    assert Loan.objects.get().book_id == book.pk


def test_staff_without_the_permission_cannot_return_a_loan(book: Book, member: Member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    _, client = desk_client(ISSUE_LOAN)
    url = reverse("loan-return", args=[loan.pk])
    assert client.get(url).status_code == 403
    response = client.post(url, {"return_date": datetime.date.today().isoformat()})
    assert response.status_code == 403
    loan.refresh_from_db()
    assert loan.return_date is None


def test_staff_with_the_permission_returns_a_loan(book: Book, member: Member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    _, client = desk_client(RETURN_LOAN)
    response = client.post(
        reverse("loan-return", args=[loan.pk]),
        {"return_date": datetime.date.today().isoformat()},
    )
    assert response.status_code == 303
    loan.refresh_from_db()
    assert loan.return_date is not None


def test_superusers_hold_every_permission_and_inactive_users_none():
    superuser = get_user_model().objects.create_superuser(
        "root", password=DESK_PASSWORD
    )
    assert user_may(superuser, ISSUE_LOAN)
    superuser.is_active = False
    assert not user_may(superuser, ISSUE_LOAN)


def test_every_named_permission_exists_to_be_granted():
    for perm in NAMED:
        assert permission_get(perm).codename == perm.split(".")[1]


def test_the_seed_staff_account_holds_every_named_permission():
    # `make run` signs in as this account and must reach every desk and dashboard.
    seed_library()
    staff = get_user_model().objects.get(username=STAFF_USERNAME)
    assert [perm for perm in NAMED if not user_may(staff, perm)] == []
