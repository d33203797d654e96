"""The demo library: the course's Cache Layers data set, loaded idempotently.

Rows carry the course's ids so lab numbers match the lessons. Existing rows are left as
they are (a running library keeps its loans), missing ones are added.
"""

from __future__ import annotations

import datetime
import secrets
from dataclasses import dataclass
from typing import TypeVar

from django.contrib.auth import get_user_model
from django.core.management.color import no_style
from django.db import connection, models, transaction

from library.models import Book, Branch, Loan, Member

M = TypeVar("M", bound=models.Model)

BRANCHES = [
    (1, "Central", "Ankara"),
    (2, "Bahcelievler", "Ankara"),
    (3, "Kadikoy", "Istanbul"),
    (4, "Konak", "Izmir"),
]
BOOKS, MEMBERS, LOANS = 300, 200, 4000
COPIES_ON_SHELF = 3  # the course's shelf count for every book
STAFF_USERNAME = "staff"
READER_USERNAME = "reader"  # signs in as member #1 to see a private loan history


@dataclass(frozen=True)
class SeedResult:
    created: dict[str, int]
    staff_password: str | None  # only set when an account was created or reset


def book_row(n: int) -> Book:
    return Book(
        id=n,
        title=f"Book {n}",
        author=f"Author {n % 40 + 1}",
        publication_year=1950 + n % 70,
        branch_id=n % 4 + 1,
        on_shelf=COPIES_ON_SHELF,
    )


def member_row(n: int) -> Member:
    return Member(
        id=n,
        first_name=f"Member{n}",
        last_name=f"Surname{n}",
        email=f"member{n}@example.test",
        registered_at=datetime.date(2024, 1, 1),
    )


def loan_row(n: int) -> Loan:
    # Every fifth loan is still open, as in the course's data.
    return Loan(
        id=n,
        book_id=n % BOOKS + 1,
        member_id=n % MEMBERS + 1,
        pickup_date=datetime.date(2025, n % 12 + 1, n % 28 + 1),
        return_date=None if n % 5 == 0 else datetime.date(2025, 12, 31),
    )


def _insert_missing(model: type[M], rows: list[M]) -> int:
    existing = set(model._default_manager.values_list("pk", flat=True))
    missing = [row for row in rows if row.pk not in existing]
    model._default_manager.bulk_create(missing, batch_size=500)
    return len(missing)


def _reset_sequences() -> None:
    # Explicit ids leave PostgreSQL's sequences behind; SQLite needs nothing.
    statements = connection.ops.sequence_reset_sql(
        no_style(), [Branch, Book, Member, Loan]
    )
    with connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(sql)


def _ensure_user(username: str, *, staff: bool, password: str) -> bool:
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(
        username=username, defaults={"is_staff": staff, "is_superuser": staff}
    )
    if created:
        user.set_password(password)
        user.save()
    return created


def seed_library(*, reset_password: bool = False) -> SeedResult:
    """Load the demo library; create the staff and reader accounts when missing."""
    with transaction.atomic():
        created = {
            "branches": _insert_missing(
                Branch, [Branch(id=i, name=n, city=c) for i, n, c in BRANCHES]
            ),
            "books": _insert_missing(Book, [book_row(n) for n in range(1, BOOKS + 1)]),
            "members": _insert_missing(
                Member, [member_row(n) for n in range(1, MEMBERS + 1)]
            ),
            "loans": _insert_missing(Loan, [loan_row(n) for n in range(1, LOANS + 1)]),
        }
        _reset_sequences()
        password = secrets.token_urlsafe(12)
        new_staff = _ensure_user(STAFF_USERNAME, staff=True, password=password)
        new_reader = _ensure_user(READER_USERNAME, staff=False, password=password)
        Member.objects.filter(pk=1, user__isnull=True).update(
            user=get_user_model().objects.get(username=READER_USERNAME)
        )
        if reset_password and not (new_staff and new_reader):
            for name in (STAFF_USERNAME, READER_USERNAME):
                user = get_user_model().objects.get(username=name)
                user.set_password(password)
                user.save(update_fields=["password"])
            new_staff = True
    return SeedResult(created=created, staff_password=password if new_staff else None)
