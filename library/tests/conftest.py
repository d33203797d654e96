"""The library tests' cache scope and accounts (their rows: the root conftest)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.test import Client

from library.cache import reads
from library.cache.metrics import cache_redis
from library.cache.reads import specs
from library.cache.store import local_tier, refreshes_wait
from library.models import Member
from tests.people import account


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
        monkeypatch.setattr(module, "book_record", lambda pk: f"{scope}-version-{pk}")
    monkeypatch.setattr(specs, "library_tenant", lambda: f"{scope}-library")
    local_tier.clear()
    yield scope
    refreshes_wait(5)
    local_tier.clear()
    client = cache_redis()
    for key in client.scan_iter(match=f"*{scope}*"):
        client.delete(key)


@pytest.fixture
def staff_user() -> User:
    return account("desk", staff=True)


@pytest.fixture
def staff_client(client: Client, staff_user: User) -> Client:
    client.force_login(staff_user)
    return client


@pytest.fixture
def member_client(client: Client, member: Member) -> Client:
    assert member.user is not None
    client.force_login(member.user)
    return client
