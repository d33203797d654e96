"""Run a lab with overrides and read its tables: shared by the lab test files.

Also the checks every lab's tests repeat (the ``lab`` command's JSON and refusals,
charts that name numeric columns of the model's tables), and the libraries of a
lab's own shape its live tests build (its workload reads that many rows).
"""

from __future__ import annotations

import datetime
import json
import os
from io import StringIO
from typing import Any, cast

from django.core.management import call_command

from config.processes import children
from course.labs.harness.base import Lab, LabResult, Tables
from course.labs.registry import lab_get
from library.models import Book, Branch, Member

# The variability parameters the four queueing labs share, at their defaults: even
# arrivals and equal jobs, the course's own setting.
DETERMINISTIC = {
    "arrivals": "fixed",
    "service_cv": 0,
    "utilisations": [50, 70, 80, 90, 95],
    "variability_jobs": 20000,
    "seed": 20250729,
}


def run(slug: str, **overrides: Any) -> LabResult:
    """Run the lab's model with ``overrides``; return its whole result."""
    lab = lab_get(slug)
    return lab.run(lab.validate(overrides))


def tables_of(lab: str | Lab[Any], *, live: bool = False, **overrides: Any) -> Tables:
    """Run the lab (and its live part with ``live``); return its tables."""
    found = lab_get(lab) if isinstance(lab, str) else lab
    return found.run(found.validate(overrides), live=live)["tables"]


def live_tables(lab: str | Lab[Any], **overrides: Any) -> Tables:
    """Run the lab with its live part here (no sandbox); return its tables."""
    return tables_of(lab, live=True, **overrides)


def _tables(found: LabResult | Tables) -> Tables:
    # A result holds its tables under "tables"; no lab names a table "lesson".
    return cast("Tables", found["tables"] if "lesson" in found else found)


def rows(found: LabResult | Tables, name: str) -> list[list[Any]]:
    # Any, not Cell: a test does its arithmetic on cells it knows the type of.
    return _tables(found)[name]["rows"]


def columns(found: LabResult | Tables, name: str) -> list[str]:
    return _tables(found)[name]["columns"]


def records(found: LabResult | Tables, name: str) -> list[dict[str, Any]]:
    """Rows as column -> value records: a wrong column order reads as a clear diff."""
    table = _tables(found)[name]
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


def assert_no_children_left() -> None:
    # The harness stops (and reaps) every worker and work-horse it started.
    assert children(os.getpid()) == []


# --- libraries of a lab's own shape (its workload reads this many rows) -------------


def make_branches() -> list[Branch]:
    return [
        Branch.objects.create(pk=pk, name=f"Branch {pk}", city="Ankara")
        for pk in (1, 2, 3)
    ]


def make_library(*, books: int, members: int) -> None:
    branches = [
        Branch.objects.create(pk=pk, name=f"Branch {pk}", city="Izmir")
        for pk in (1, 2, 3, 4)
    ]
    Book.objects.bulk_create(
        Book(title=f"Book {n}", author="Anon", branch=branches[n % 4], on_shelf=2)
        for n in range(1, books + 1)
    )
    Member.objects.bulk_create(
        Member(
            first_name=f"Reader{n}",
            last_name="Test",
            registered_at=datetime.date(2024, 1, 1),
        )
        for n in range(1, members + 1)
    )


def make_catalogue(books: int, *, on_shelf: int = 5) -> list[Branch]:
    branches = [
        Branch.objects.create(pk=pk, name=f"Branch {pk}", city="Ankara")
        for pk in (1, 2, 3, 4)
    ]
    Book.objects.bulk_create(
        Book(
            pk=n,
            title=f"Book {n}",
            author=f"Author {n % 7}",
            branch=branches[n % 4],
            on_shelf=on_shelf,
        )
        for n in range(1, books + 1)
    )
    return branches


def make_books(shelves: tuple[int, ...] = (2, 3, 1)) -> list[int]:
    branch = Branch.objects.create(name="Central", city="C")
    return [
        Book.objects.create(title=f"Book {n}", author="A", branch=branch, on_shelf=s).pk
        for n, s in enumerate(shelves)
    ]


def shelves() -> dict[int, int]:
    return dict(Book.objects.values_list("pk", "on_shelf"))


def lab_keys(redis_client: Any) -> list[bytes]:
    return list(redis_client.scan_iter(match="lab:*")) + list(
        redis_client.scan_iter(match="sf:lab:*")
    )


def lab_command(*args: str) -> tuple[object, str, str]:
    """Run ``manage.py lab ARGS``; return its exit status, stdout and stderr."""
    out, err = StringIO(), StringIO()
    try:
        call_command("lab", *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def lab_json(slug: str, *args: str) -> dict[str, Any]:
    """Run ``manage.py lab SLUG ARGS --json``; check it succeeded; return the document.

    Success is exit status 0, nothing on stderr, and a document of the lesson
    ``slug`` with exactly its lesson, params and tables.
    """
    status, out, err = lab_command(slug, *args, "--json")
    assert (status, err) == (0, "")
    document: dict[str, Any] = json.loads(out)
    assert list(document) == ["lesson", "params", "tables"]
    assert document["lesson"] == slug
    return document


def assert_refused(*args: str, needle: str) -> None:
    """Check that ``manage.py lab ARGS`` exits 2 with one line on stderr, no output."""
    status, out, err = lab_command(*args)
    assert (status, out) == (2, "")
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def assert_charts_name_numeric_columns(
    slug: str, *, numeric: tuple[type, ...] = (int, float)
) -> None:
    """Check every chart of the lab against its tables on the defaults.

    The chart's label is a column, and each of its values a column whose cells are
    all of a ``numeric`` type.
    """
    lab = lab_get(slug)
    tables = lab.run(lab.defaults())["tables"]
    assert lab.charts
    for chart in lab.charts:
        found = tables[chart.table]
        assert chart.label in found["columns"]
        for value in chart.values:
            at = found["columns"].index(value)
            assert all(isinstance(row[at], numeric) for row in found["rows"])


def lab_form_page(client: Any, slug: str) -> str:
    """Return the lesson page of ``slug``; check it offers the lab form.

    The form posts to the lab's run URL and has a field for every parameter.
    """
    html: str = client.get(f"/course/{slug}/").content.decode()
    assert '<form id="lab-form"' in html
    assert f'action="/course/{slug}/run"' in html
    for param in lab_get(slug).params:
        assert f'name="{param.name}"' in html
    return html
