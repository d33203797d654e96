"""The demo library matches the course's data set and can be loaded again safely."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.test import override_settings

from library.models import Book, Branch, Loan, Member
from library.seed import seed_library

pytestmark = pytest.mark.django_db


def _counts() -> tuple[int, int, int, int]:
    return (
        Branch.objects.count(),
        Book.objects.count(),
        Member.objects.count(),
        Loan.objects.count(),
    )


def test_seed_loads_the_course_data_set():
    result = seed_library()

    assert _counts() == (4, 300, 200, 4000)
    assert result.created == {
        "branches": 4,
        "books": 300,
        "members": 200,
        "loans": 4000,
    }
    assert list(Branch.objects.order_by("id").values_list("id", "name", "city")) == [
        (1, "Central", "Ankara"),
        (2, "Bahcelievler", "Ankara"),
        (3, "Kadikoy", "Istanbul"),
        (4, "Konak", "Izmir"),
    ]


def test_seed_rows_follow_the_course_formulas():
    seed_library()

    # Expected values written out by hand from the course's formulas, so a change
    # of formula in the seed shows up here.
    book = Book.objects.get(pk=1)
    assert (book.title, book.author, book.publication_year) == (
        "Book 1",
        "Author 2",
        1951,
    )
    assert (book.branch_id, book.on_shelf, book.version) == (2, 3, 1)
    book = Book.objects.get(pk=300)
    assert (book.author, book.publication_year, book.branch_id) == (
        "Author 21",
        1970,
        1,
    )
    assert Member.objects.get(pk=7).email == "member7@example.test"

    open_loan = Loan.objects.get(pk=5)
    assert (open_loan.book_id, open_loan.member_id) == (6, 6)
    assert open_loan.pickup_date == datetime.date(2025, 6, 6)
    assert open_loan.return_date is None
    closed = Loan.objects.get(pk=7)
    assert (closed.book_id, closed.member_id) == (8, 8)
    assert closed.pickup_date == datetime.date(2025, 8, 8)
    assert closed.return_date == datetime.date(2025, 12, 31)
    last = Loan.objects.get(pk=4000)
    assert (last.book_id, last.member_id) == (101, 1)
    assert last.pickup_date == datetime.date(2025, 5, 25)
    assert last.return_date is None
    # Every fifth loan is open.
    assert Loan.objects.filter(return_date__isnull=True).count() == 800


def test_seed_links_the_reader_to_member_1_and_makes_staff():
    seed_library()

    users = get_user_model().objects
    assert users.get(username="staff").is_staff
    reader = users.get(username="reader")
    assert not reader.is_staff
    assert Member.objects.get(pk=1).user == reader


def test_seed_twice_adds_nothing_and_keeps_existing_rows():
    first = seed_library()
    Book.objects.filter(pk=1).update(on_shelf=0)  # a running library's state
    Loan.objects.filter(pk=2).delete()

    second = seed_library()

    assert first.staff_password is not None
    assert second.staff_password is None
    assert second.created == {"branches": 0, "books": 0, "members": 0, "loans": 1}
    assert _counts() == (4, 300, 200, 4000)
    assert Book.objects.get(pk=1).on_shelf == 0
    assert get_user_model().objects.filter(username="staff").count() == 1


def test_seed_keeps_sequences_ahead_of_the_explicit_ids():
    seed_library()

    # On PostgreSQL explicit ids leave the sequence behind unless it is reset.
    assert Branch.objects.create(name="New", city="Bursa").pk == 5


def _run_command(*args: str) -> str:
    out = io.StringIO()
    call_command("seed_library", *args, stdout=out)
    return out.getvalue()


def test_command_hides_the_password_when_debug_is_off(tmp_path):
    with override_settings(DEBUG=False, VAR_DIR=tmp_path):
        output = _run_command()

    assert "demo password not shown: DEBUG is off" in output
    assert "staff login" not in output
    assert not (tmp_path / "demo-credentials.json").exists()


def test_command_prints_a_working_password_when_debug_is_on(tmp_path):
    # VAR_DIR points at a temporary directory so the developer's credentials file
    # is left alone.
    with override_settings(DEBUG=True, VAR_DIR=tmp_path):
        output = _run_command()
        rerun = _run_command()

    password = json.loads((tmp_path / "demo-credentials.json").read_text())["password"]
    assert f"staff login: staff / {password}" in output
    assert f"member login: reader / {password}" in output
    assert f"staff login: staff / {password}" in rerun  # read back on a rerun
    assert authenticate(username="staff", password=password) is not None
    assert authenticate(username="reader", password=password) is not None
