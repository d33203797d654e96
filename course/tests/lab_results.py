"""Run a lab with overrides and read its tables: shared by the lab test files.

Also the checks every lab's tests repeat: the ``lab`` command's JSON and refusals,
and charts that name numeric columns of the model's tables.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from django.core.management import call_command

from course.labs.harness.base import Cell, LabResult
from course.labs.registry import lab_get

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
    lab = lab_get(slug)
    return lab.run(lab.validate(overrides))


def rows(result: LabResult, name: str) -> list[list[Cell]]:
    return result["tables"][name]["rows"]


def columns(result: LabResult, name: str) -> list[str]:
    return result["tables"][name]["columns"]


def records(result: LabResult, name: str) -> list[dict[str, Cell]]:
    """Rows as column -> value records: a wrong column order reads as a clear diff."""
    found = result["tables"][name]
    return [dict(zip(found["columns"], row, strict=True)) for row in found["rows"]]


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
