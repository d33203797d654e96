"""Run a lab with overrides and read its tables: shared by the lab test files."""

from __future__ import annotations

from typing import Any

from course.labs.base import Cell, LabResult
from course.labs.registry import lab_get


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
