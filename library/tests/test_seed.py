"""The demo library looks like a library and can be loaded again safely."""

from __future__ import annotations

import csv
import datetime
import html
import io
import json
import re
from collections import Counter
from statistics import mean

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.db.models import Count, Q
from django.test import override_settings

from library.demo_library import (
    DATA_DIR,
    MAX_COPIES,
    catalogue,
    demo_library,
    email_local_part,
)
from library.models import Book, Branch, Loan, Member
from library.seed import seed_library
from library.services.notices import LOAN_PERIOD_DAYS

pytestmark = pytest.mark.django_db

TODAY = datetime.date(2026, 3, 16)


def _counts() -> tuple[int, int, int, int]:
    return (
        Branch.objects.count(),
        Book.objects.count(),
        Member.objects.count(),
        Loan.objects.count(),
    )


def test_seed_loads_every_generated_row_and_reports_the_counts():
    expected = demo_library(today=TODAY)

    result = seed_library(today=TODAY)

    sizes = (
        len(expected.branches),
        len(expected.books),
        len(expected.members),
        len(expected.loans),
    )
    assert _counts() == sizes
    assert result.created == dict(
        zip(("branches", "books", "members", "loans"), sizes, strict=True)
    )
    # Ids start at 1 without gaps: the labs' live parts read "the n-th book".
    assert list(Book.objects.values_list("pk", flat=True)) == list(
        range(1, sizes[1] + 1)
    )
    assert list(Loan.objects.order_by("pk").values_list("pk", flat=True)) == list(
        range(1, sizes[3] + 1)
    )


def test_the_same_day_gives_the_same_library_and_the_day_only_moves_dates():
    first = demo_library(today=TODAY)
    again = demo_library(today=TODAY)
    later = demo_library(today=TODAY + datetime.timedelta(days=30))

    def books(rows):
        return [(b.pk, b.title, b.author, b.branch_id, b.on_shelf) for b in rows.books]

    def loans(rows):
        return [
            (x.pk, x.book_id, x.member_id, x.pickup_date, x.return_date)
            for x in rows.loans
        ]

    assert books(first) == books(again)
    assert loans(first) == loans(again)
    assert [m.full_name for m in first.members] == [m.full_name for m in later.members]
    assert [b.title for b in first.books] == [b.title for b in later.books]
    assert max(x.pickup_date for x in later.loans) > TODAY


def test_seed_twice_adds_nothing_and_keeps_existing_rows():
    first = seed_library(today=TODAY)
    counts = _counts()
    Book.objects.filter(pk=1).update(on_shelf=0)  # a running library's state
    Loan.objects.filter(pk=2).delete()

    second = seed_library(today=TODAY)

    assert first.staff_password is not None
    assert second.staff_password is None
    assert second.created == {"branches": 0, "books": 0, "members": 0, "loans": 1}
    assert _counts() == counts
    assert Book.objects.get(pk=1).on_shelf == 0
    assert get_user_model().objects.filter(username="staff").count() == 1


def test_titles_are_real_works_of_the_shipped_catalogue():
    seed_library(today=TODAY)

    works = {(w.title, w.author, w.year) for w in catalogue()}
    rows = set(Book.objects.values_list("title", "author", "publication_year"))
    assert rows <= works
    assert len({title for title, _, _ in rows}) >= 300  # the catalogue is on shelves
    assert ("Pride and Prejudice", "Jane Austen", 1813) in rows
    assert ("Anna Karenina", "Leo Tolstoy", 1878) in rows
    assert not Book.objects.filter(title__regex=r"^Book \d+$").exists()
    assert not Book.objects.filter(author__regex=r"^Author \d+$").exists()
    assert not Member.objects.filter(first_name__regex=r"^Member\d+$").exists()


def test_catalogue_file_holds_distinct_public_domain_works():
    with (DATA_DIR / "catalogue.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))

    assert len(rows) >= 300
    assert len({(r["title"], r["author"]) for r in rows}) == len(rows)
    assert all(r["title"].strip() and r["author"].strip() for r in rows)
    # Published before 1930 (public domain in the US as of 2026); translations of
    # older texts carry the translation's year, so no year is before print.
    years = [int(r["year"]) for r in rows]
    assert min(years) > 1450
    assert max(years) < 1930


def test_branches_differ_in_name_city_and_size():
    seed_library(today=TODAY)

    branches = list(Branch.objects.annotate(titles=Count("books")).order_by("id"))
    assert len(branches) >= 5
    assert len({b.name for b in branches}) == len(branches)
    assert len({b.city for b in branches}) >= 3
    sizes = sorted(b.titles for b in branches)
    assert len(set(sizes)) == len(sizes)
    assert sizes[-1] >= 3 * sizes[0]  # the central library dwarfs the smallest
    # Branches hold different parts of the catalogue, not copies of one list.
    shelves = [
        set(Book.objects.filter(branch=b).values_list("title", flat=True))
        for b in branches
    ]
    assert all(a != b for i, a in enumerate(shelves) for b in shelves[i + 1 :])


def test_copies_vary_per_book_and_branch():
    seed_library(today=TODAY)

    books = Book.objects.annotate(
        out=Count("loans", filter=Q(loans__return_date__isnull=True))
    )
    copies = Counter(b.on_shelf + b.out for b in books)
    shelves = Counter(b.on_shelf for b in books)
    assert set(copies) <= set(range(1, MAX_COPIES + 1))
    assert len(copies) == MAX_COPIES  # every count from 1 to 6 occurs
    assert shelves[0] > 0  # some books are all out
    per_branch = [
        mean(b.on_shelf + b.out for b in books if b.branch_id == branch)
        for branch in Branch.objects.values_list("pk", flat=True)
    ]
    assert max(per_branch) - min(per_branch) > 0.5
    # A work the central library holds is held elsewhere with its own copy count.
    shared = (
        Book.objects.values("title", "author")
        .annotate(n=Count("id"))
        .filter(n__gte=3)
        .count()
    )
    assert shared > 50


def test_loans_are_spread_returned_open_and_overdue():
    seed_library(today=TODAY)

    loans = list(Loan.objects.select_related("member"))
    returned = [(x, x.return_date) for x in loans if x.return_date is not None]
    out = [x for x in loans if x.return_date is None]
    due = TODAY - datetime.timedelta(days=LOAN_PERIOD_DAYS)
    overdue = [x for x in out if x.pickup_date < due]
    assert len(returned) > 10 * len(out) > 0
    assert 0 < len(overdue) < len(out)
    assert all(x.pickup_date <= TODAY for x in loans)
    assert all(x.pickup_date <= back <= TODAY for x, back in returned)
    assert all(x.pickup_date >= x.member.registered_at for x in loans)
    late = [x for x, back in returned if (back - x.pickup_date).days > LOAN_PERIOD_DAYS]
    assert late
    # Spread over the months and over the readers: heavy, light and idle members.
    assert len({(x.pickup_date.year, x.pickup_date.month) for x in loans}) >= 15
    per_member = Counter(x.member_id for x in loans)
    assert max(per_member.values()) >= 40
    assert Member.objects.exclude(pk__in=list(per_member)).exists()
    # Nobody holds two copies of one book at once.
    assert len({(x.member_id, x.book_id) for x in out}) == len(out)


def test_members_have_varied_names_and_ascii_emails():
    seed_library(today=TODAY)

    members = list(Member.objects.all())
    assert len(members) >= 200  # the cache-metrics lab's live part reads 200
    assert len({m.full_name for m in members}) >= 0.8 * len(members)
    assert len({m.first_name for m in members}) >= 50
    assert not [m for m in members if any(c.isdigit() for c in m.full_name)]
    # Real family names recur (one Kaya among many), numbered ones never did.
    assert Counter(m.last_name for m in members).most_common(1)[0][1] >= 3
    emails = [m.email for m in members if m.email]
    assert len(set(emails)) == len(emails)
    assert all(re.fullmatch(r"[a-z0-9.]+@example\.test", e) for e in emails)
    # A Turkish name with an s-cedilla and a dotless i (no ASCII decomposition).
    assert email_local_part("I\u015f\u0131k", "Ünal") == "isik.unal"
    assert email_local_part("İrem", "O'Brien") == "irem.obrien"


def test_seed_links_the_reader_to_member_1_with_a_history_to_show():
    seed_library(today=TODAY)

    users = get_user_model().objects
    assert users.get(username="staff").is_staff
    reader = users.get(username="reader")
    assert not reader.is_staff
    member = Member.objects.get(pk=1)
    assert member.user == reader
    history = member.loans.all()
    assert history.filter(return_date__isnull=False).count() >= 10
    assert history.filter(return_date__isnull=True).exists()


def test_seed_keeps_sequences_ahead_of_the_explicit_ids():
    seed_library(today=TODAY)

    # On PostgreSQL explicit ids leave the sequence behind unless it is reset.
    top = Branch.objects.order_by("-pk").values_list("pk", flat=True)[0]
    assert Branch.objects.create(name="New", city="Bursa").pk == top + 1
    assert Book.objects.create(title="New", author="A", branch_id=1).pk == (
        Book.objects.count()
    )


def test_catalogue_page_lists_the_seeded_titles_alphabetically(client):
    seed_library(today=TODAY)

    response = client.get("/branches/1/books/")

    assert response.status_code == 200
    found = re.findall(r'<a href="/books/\d+/">([^<]*)</a>', response.text)
    titles = [html.unescape(title) for title in found]
    expected = Book.objects.filter(branch_id=1).order_by("title", "id")
    assert titles == [b.title for b in expected[:20]]
    # Real titles sort as words ("Book 100" came before "Book 2"): page 1 is the
    # start of the alphabet, whatever collation the database uses.
    initials = [title[0].casefold() for title in titles]
    assert initials == sorted(initials)
    assert initials[0] == "a"


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

    kept = json.loads((tmp_path / "demo-credentials.json").read_text())
    [password] = kept["databases"].values()
    assert f"staff login: staff / {password}" in output
    assert f"member login: reader / {password}" in output
    assert f"staff login: staff / {password}" in rerun  # read back on a rerun
    assert authenticate(username="staff", password=password) is not None
    assert authenticate(username="reader", password=password) is not None


def test_seeding_here_keeps_the_password_of_another_database(tmp_path):
    # What `make run` left: the SQLite database's password, beside which `make
    # cluster` now seeds this one.
    theirs = {"sqlite:/elsewhere/var/library.sqlite3": "their-password-1"}
    path = tmp_path / "demo-credentials.json"
    path.write_text(json.dumps({"databases": theirs}))
    with override_settings(DEBUG=True, VAR_DIR=tmp_path):
        output = _run_command()

    kept = json.loads(path.read_text())["databases"]
    assert kept["sqlite:/elsewhere/var/library.sqlite3"] == "their-password-1"
    [ours] = [password for name, password in kept.items() if name not in theirs]
    assert f"staff login: staff / {ours}" in output
    assert authenticate(username="staff", password=ours) is not None


def test_a_file_of_the_old_shape_is_read_for_the_database_it_works_in(tmp_path):
    seed_library(today=TODAY)
    staff = get_user_model().objects.get(username="staff")
    staff.set_password("the-old-file-s-password")
    staff.save()
    path = tmp_path / "demo-credentials.json"
    path.write_text(json.dumps({"password": "the-old-file-s-password"}))
    with override_settings(DEBUG=True, VAR_DIR=tmp_path):
        output = _run_command()

    assert "staff login: staff / the-old-file-s-password" in output
    [password] = json.loads(path.read_text())["databases"].values()
    assert password == "the-old-file-s-password"
    # A password that no longer works here is never printed.
    staff.set_password("changed-in-the-admin")
    staff.save()
    with override_settings(DEBUG=True, VAR_DIR=tmp_path):
        output = _run_command()
    assert "demo password unknown: rerun with --reset-password" in output
