"""The course's data set as database rows: the Cache Layers measurement library.

Four branches; 300 books "Book n" by "Author n % 40 + 1", published 1950 + n % 70, in
branch n % 4 + 1 with three copies each; 200 members; 4000 loans cycling books and
members, every fifth still open. These are the rows the cache-metrics model reasons
about (``course.labs.cache_metrics.model``), with the same ids and the same numbers
(``dataset_shape``), so a benchmark or a test that loads them measures what the
lessons describe.

The demo library (``library.seed``) is something else and may change; nothing that
must match a lesson reads it. ``dataset_load`` writes these rows into an empty
database (a benchmark's, a test's), never beside the demo library: the ids overlap.
"""

from __future__ import annotations

import datetime
from typing import Final

from django.db import transaction

from course.labs.harness.dataset_shape import (
    AUTHOR_COUNT,
    BOOK_COUNT,
    BRANCH_COUNT,
    FIRST_YEAR,
    LOAN_COUNT,
    MEMBER_COUNT,
    YEAR_SPAN,
)
from library.models import Book, Branch, Loan, Member
from library.seed import rows_insert_missing, sequences_reset

COPIES_ON_SHELF: Final = 3  # the course's shelf count for every book
BRANCHES: Final = (
    (1, "Central", "Ankara"),
    (2, "Bahcelievler", "Ankara"),
    (3, "Kadikoy", "Istanbul"),
    (4, "Konak", "Izmir"),
)
REGISTERED_ON: Final = datetime.date(2024, 1, 1)
RETURNED_ON: Final = datetime.date(2025, 12, 31)


def dataset_book(n: int) -> Book:
    return Book(
        id=n,
        title=f"Book {n}",
        author=f"Author {n % AUTHOR_COUNT + 1}",
        publication_year=FIRST_YEAR + n % YEAR_SPAN,
        branch_id=n % BRANCH_COUNT + 1,
        on_shelf=COPIES_ON_SHELF,
    )


def dataset_member(n: int) -> Member:
    return Member(
        id=n,
        first_name=f"Member{n}",
        last_name=f"Surname{n}",
        email=f"member{n}@example.test",
        registered_at=REGISTERED_ON,
    )


def dataset_loan(n: int) -> Loan:
    # Every fifth loan is still open, as in the model's ``_loans``.
    return Loan(
        id=n,
        book_id=n % BOOK_COUNT + 1,
        member_id=n % MEMBER_COUNT + 1,
        pickup_date=datetime.date(2025, n % 12 + 1, n % 28 + 1),
        return_date=None if n % 5 == 0 else RETURNED_ON,
    )


def dataset_load() -> dict[str, int]:
    """Write the missing rows of the course's data set; return how many per table."""
    with transaction.atomic():
        created = {
            "branches": rows_insert_missing(
                Branch, [Branch(id=i, name=n, city=c) for i, n, c in BRANCHES]
            ),
            "books": rows_insert_missing(
                Book, [dataset_book(n) for n in range(1, BOOK_COUNT + 1)]
            ),
            "members": rows_insert_missing(
                Member, [dataset_member(n) for n in range(1, MEMBER_COUNT + 1)]
            ),
            "loans": rows_insert_missing(
                Loan, [dataset_loan(n) for n in range(1, LOAN_COUNT + 1)]
            ),
        }
        # Rows created after these (a benchmark's extra branch) need fresh ids.
        sequences_reset([Branch, Book, Member, Loan])
    return created
