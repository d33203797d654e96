"""Fixtures of the realtime tests."""

from __future__ import annotations

import datetime

import pytest

from library.models import Book, Branch, Member


@pytest.fixture
def stock_branch(redis_client) -> Branch:
    """Branch 1 with one book (id 1, five on the shelf) and member 1: what the
    live-shelf socket tests broadcast about."""
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=5)
    Member.objects.create(
        id=1, first_name="A", last_name="B", registered_at=datetime.date(2024, 1, 1)
    )
    return branch
