"""Live parts of the HTTP Caching and Cache Key Design labs, on a real daphne.

Each live part starts its own daphne against this test run's database and Redis, so
the rows it reads must be committed (transaction=True). The test database starts
empty: each test creates the few branches, books and the member the lab asks for.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import pytest
from django.contrib.auth.models import User

from course.labs.harness import live as harness
from course.labs.harness.base import Tables
from course.labs.registry import lab_get
from library.models import Book, Branch, Member

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def live_tables(slug: str) -> Tables:
    lab = lab_get(slug)
    return lab.run(lab.defaults(), live=True)["tables"]


def rows(tables: Tables, name: str) -> list[list[Any]]:
    return tables[name]["rows"]


def make_branches() -> list[Branch]:
    return [
        Branch.objects.create(pk=pk, name=f"Branch {pk}", city="Ankara")
        for pk in (1, 2, 3)
    ]


def test_http_caching_live_validators_and_directives(redis_client):
    branches = make_branches()
    book = Book.objects.create(
        pk=7, title="Sand: Borges Selection", author="Anthology",
        branch=branches[0], on_shelf=3,
    )  # fmt: skip
    Member.objects.create(
        first_name="Ada", last_name="Lovelace", registered_at=datetime.date(2024, 1, 1)
    )
    users_before = User.objects.count()

    tables = live_tables("http-caching")

    validators = rows(tables, "live_validators")
    assert tables["live_validators"]["columns"] == [
        "request",
        "status",
        "downloaded_bytes",
    ]
    assert [row[0] for row in validators] == [
        row[0] for row in rows(tables, "validators")
    ]
    assert [row[1] for row in validators] == [200, 304, 304, 200]
    assert validators[0][2] > 0
    assert validators[1][2] == validators[2][2] == 0
    assert validators[3][2] > 0
    [before, after] = rows(tables, "live_headers")
    assert before[1] != after[1]  # the write changed the validator
    assert dict(rows(tables, "live_directives")) == {
        "/books/7/": "public, max-age=60",
        "/branches/1/": "public, max-age=5, stale-while-revalidate=30",
        f"/members/{Member.objects.get().pk}/": "private, max-age=30",
        "/loans/issue/": "max-age=0, no-cache, no-store, must-revalidate, private",
    }
    book.refresh_from_db()
    assert book.on_shelf == 3  # the shelf count is put back
    assert User.objects.count() == users_before  # the throwaway account is gone
    assert harness.child_pids(os.getpid()) == []


def test_cache_key_design_live_leaks_only_with_the_glued_key(redis_client):
    branches = make_branches()
    for number in range(1, 25):
        Book.objects.create(
            title=f"Book {number}", author="Anon",
            branch=branches[number % 3], on_shelf=1,
        )  # fmt: skip

    tables = live_tables("cache-key-design")

    tenants = rows(tables, "live_tenants")
    assert tables["live_tenants"]["columns"] == [
        "case", "key", "branch_asked", "branch_served", "result",
    ]  # fmt: skip
    assert [(r[2], r[3], r[4]) for r in tenants] == [
        (2, 2, "correct"),
        (3, 2, "leak"),  # branch 3 is served branch 2's books
        (2, 2, "correct"),
        (3, 3, "correct"),
        (2, 2, "correct"),
        (3, 3, "correct"),
    ]
    assert tenants[0][1] == tenants[1][1]  # one glued key for both branches
    assert tenants[2][1] != tenants[3][1]  # the generator's keys differ per tenant
    assert "tbranch-3" in tenants[3][1]
    assert "GET /branches/3/books/" in tenants[5][0]
    [[served, foreign, _titles]] = rows(tables, "live_leak")
    assert served == foreign > 0
    # the naive demo keys are deleted at the end
    assert not list(redis_client.scan_iter(match="lab-*:search:*"))
    assert harness.child_pids(os.getpid()) == []
