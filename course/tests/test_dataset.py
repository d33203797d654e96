"""The labs keep their own data sets, whatever the demo library holds.

``course.labs.harness.dataset`` is the Cache Layers library as rows (what the benchmarks
load); the labs' models carry their data in code. Neither may follow the demo library
(``library.seed``), which changes with the catalogue it ships.
"""

from __future__ import annotations

import datetime

import pytest

from course.labs.cache_metrics.model import library_data
from course.labs.harness.base import LabResult
from course.labs.harness.dataset import dataset_load
from course.labs.harness.dataset_shape import BOOK_COUNT, BRANCH_COUNT, MEMBER_COUNT
from course.labs.registry import LABS
from library.models import Book, Branch, Loan, Member
from library.seed import seed_library

pytestmark = pytest.mark.django_db


def test_dataset_rows_are_the_ones_the_cache_metrics_model_reads():
    dataset_load()

    data = library_data()
    for book in Book.objects.all():
        assert {
            "book_id": book.pk,
            "title": book.title,
            "author": book.author,
            "publication_year": book.publication_year,
        } == data.book(book.pk, with_year=True)
    assert Book.objects.count() == BOOK_COUNT
    for branch in range(1, BRANCH_COUNT + 1):
        shelf = Book.objects.filter(branch_id=branch).order_by("id")
        assert [{"book_id": b.pk, "title": b.title} for b in shelf] == data.shelf_list(
            branch
        )
    assert Member.objects.count() == MEMBER_COUNT
    for member in range(1, MEMBER_COUNT + 1):
        loans = Loan.objects.filter(member_id=member).order_by("id")
        assert [{"loan_id": x.pk, "book_id": x.book_id} for x in loans] == (
            data.history(member)
        )


def test_dataset_keeps_the_course_formulas():
    created = dataset_load()

    assert created == {"branches": 4, "books": 300, "members": 200, "loans": 4000}
    assert list(Branch.objects.values_list("id", "name", "city")) == [
        (1, "Central", "Ankara"),
        (2, "Bahcelievler", "Ankara"),
        (3, "Kadikoy", "Istanbul"),
        (4, "Konak", "Izmir"),
    ]
    # Written out by hand from the course's formulas, so a changed formula shows.
    book = Book.objects.get(pk=1)
    assert (book.title, book.author, book.publication_year) == (
        "Book 1",
        "Author 2",
        1951,
    )
    assert (book.branch_id, book.on_shelf) == (2, 3)
    assert set(Book.objects.values_list("on_shelf", flat=True)) == {3}
    assert Member.objects.get(pk=7).email == "member7@example.test"
    last = Loan.objects.get(pk=4000)
    assert (last.book_id, last.member_id) == (101, 1)
    assert last.pickup_date == datetime.date(2025, 5, 25)
    assert last.return_date is None
    assert Loan.objects.filter(return_date__isnull=True).count() == 800


def test_dataset_load_twice_adds_nothing_and_leaves_room_for_new_rows():
    dataset_load()

    assert dataset_load() == {"branches": 0, "books": 0, "members": 0, "loans": 0}
    # The benchmark adds a branch of its own after loading: the sequence moved on.
    assert Branch.objects.create(name="Bench stacks", city="Bench").pk == 5


def _model_tables() -> dict[str, LabResult]:
    return {slug: lab.run(lab.defaults()) for slug, lab in LABS.items()}


def test_lab_models_give_the_same_tables_with_or_without_the_demo_library():
    without = _model_tables()

    seed_library(today=datetime.date(2026, 3, 16))
    with_demo = _model_tables()

    assert Book.objects.exists()
    for slug, result in without.items():
        assert with_demo[slug]["tables"] == result["tables"], slug
