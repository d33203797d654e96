"""Small fixtures for the library's tests: a branch, a book, members and accounts."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import Client

from library.cache import reads
from library.cache.metrics import cache_redis
from library.cache.reads import specs
from library.cache.store import local_tier, refreshes_wait
from library.models import Book, Branch, Member

PASSWORD = "correct-horse-battery"


@pytest.fixture(autouse=True)
def cache_tenants_of_this_test(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Give each test cache tenants of its own, and remove its entries afterwards.

    The database rolls back after each test but Redis keeps its entries, and the
    next test's rows get the same ids (SQLite reuses them; a new test database
    restarts PostgreSQL's sequences), so "branch 1" would meet another test's pages.
    """
    scope = f"test{uuid.uuid4().hex[:10]}"
    # Replaced in ``specs``, where the cache code looks them up, and in the package,
    # where tests read them.
    for module in (specs, reads):
        monkeypatch.setattr(module, "branch_tenant", lambda pk: f"{scope}-branch-{pk}")
        monkeypatch.setattr(module, "member_tenant", lambda pk: f"{scope}-member-{pk}")
    local_tier.clear()
    yield scope
    refreshes_wait(5)
    local_tier.clear()
    client = cache_redis()
    for key in client.scan_iter(match=f"*{scope}*"):
        client.delete(key)


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
