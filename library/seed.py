"""Load the demo library and its two accounts, idempotently.

The rows come from ``library.demo_library`` (real public-domain works, branches of
different sizes, members with ordinary names, a loan history up to today). Rows
already in the database are left as they are (a running library keeps its loans and
shelf counts); missing ones are added. The labs bring their own data sets and do
not depend on these rows (see ``course.labs.harness.dataset``).
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from django.contrib.auth import get_user_model
from django.core.management.color import no_style
from django.db import connection, models, transaction
from django.utils import timezone

from library.demo_library import demo_library
from library.models import Book, Branch, Loan, Member

M = TypeVar("M", bound=models.Model)

STAFF_USERNAME = "staff"
READER_USERNAME = "reader"  # signs in as member #1 to see a private loan history


@dataclass(frozen=True)
class SeedResult:
    created: dict[str, int]
    staff_password: str | None  # only set when an account was created or reset


def rows_insert_missing(model: type[M], rows: Sequence[M]) -> int:
    """Insert the rows whose primary key the table lacks; return how many.

    Call inside ``atomic()``: the existing keys are read first, and a concurrent
    insert of the same key would make the bulk insert fail rather than duplicate.
    """
    existing = set(model._default_manager.values_list("pk", flat=True))
    missing = [row for row in rows if row.pk not in existing]
    model._default_manager.bulk_create(missing, batch_size=500)
    return len(missing)


def sequences_reset(model_list: Sequence[type[models.Model]]) -> None:
    """Move the tables' id sequences past the largest id (explicit ids leave them).

    PostgreSQL's sequences do not see explicit ids, so the next ``create()`` would
    collide with a seeded row; SQLite needs nothing and gets no statement.
    """
    statements = connection.ops.sequence_reset_sql(no_style(), list(model_list))
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


def seed_library(
    *, reset_password: bool = False, today: datetime.date | None = None
) -> SeedResult:
    """Load the demo library; create the staff and reader accounts when missing.

    ``today`` anchors the loan history (default: the local date), so tests can fix it.
    """
    rows = demo_library(today=today or timezone.localdate())
    with transaction.atomic():
        created = {
            "branches": rows_insert_missing(Branch, rows.branches),
            "books": rows_insert_missing(Book, rows.books),
            "members": rows_insert_missing(Member, rows.members),
            "loans": rows_insert_missing(Loan, rows.loans),
        }
        sequences_reset([Branch, Book, Member, Loan])
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
