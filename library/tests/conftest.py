"""Small fixtures for the library's tests: a branch, a book, members and accounts."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import Client

from library.models import Book, Branch, Member

PASSWORD = "correct-horse-battery"


@pytest.fixture
def branch() -> Branch:
    return Branch.objects.create(name="Central", city="Ankara")


@pytest.fixture
def book(branch: Branch) -> Book:
    return Book.objects.create(
        title="The Name of the Rose", author="Umberto Eco", branch=branch, on_shelf=2
    )


def _user(username: str, *, staff: bool = False) -> User:
    # Staff are superusers, like the seed's desk account, so the admin opens fully.
    return get_user_model().objects.create_user(
        username=username, password=PASSWORD, is_staff=staff, is_superuser=staff
    )


@pytest.fixture
def member() -> Member:
    return Member.objects.create(
        first_name="Ada",
        last_name="Lovelace",
        email="ada@example.test",
        registered_at=datetime.date(2024, 1, 1),
        user=_user("ada"),
    )


@pytest.fixture
def other_member() -> Member:
    return Member.objects.create(
        first_name="Alan",
        last_name="Turing",
        registered_at=datetime.date(2024, 1, 1),
        user=_user("alan"),
    )


@pytest.fixture
def staff_user() -> User:
    return _user("desk", staff=True)


@pytest.fixture
def staff_client(client: Client, staff_user: User) -> Client:
    client.force_login(staff_user)
    return client


@pytest.fixture
def member_client(client: Client, member: Member) -> Client:
    assert member.user is not None
    client.force_login(member.user)
    return client
