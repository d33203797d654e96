"""Two runs of one lab side by side: which parameters differ, which cells moved.

Pure functions over stored results, so the comparison page only renders them. A
chart of the pair is one chart whose series are each value column twice, once per
run, so "what changed when I halved the edge cache" reads as two bars next to each
other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from course.labs.harness.base import Chart

Cell = Any
Table = dict[str, Any]
# How the two runs are named on the page and in the charts' series.
FIRST, SECOND = "A", "B"


@dataclass(frozen=True)
class ParamRow:
    name: str
    first: str
    second: str

    @property
    def differs(self) -> bool:
        return self.first != self.second


@dataclass(frozen=True)
class TablePair:
    """One table name with both runs' tables (None where a run lacks it)."""

    name: str
    first: Table | None
    second: Table | None
    # (row, column) positions of the second table whose value is not the first's.
    moved: frozenset[tuple[int, int]]

    def first_rows(self) -> list[list[tuple[Cell, bool]]]:
        return _flagged(self.first, frozenset())

    def second_rows(self) -> list[list[tuple[Cell, bool]]]:
        return _flagged(self.second, self.moved)


def _flagged(
    table: Table | None, moved: frozenset[tuple[int, int]]
) -> list[list[tuple[Cell, bool]]]:
    """Return the table's rows as (cell, moved) pairs, for the template to mark."""
    if table is None:
        return []
    return [
        [(cell, (r, c) in moved) for c, cell in enumerate(row)]
        for r, row in enumerate(table.get("rows", []))
    ]


def params_compared(
    first: dict[str, object], second: dict[str, object], names: list[str]
) -> list[ParamRow]:
    """Return every parameter of the lab with both runs' values as text."""
    return [
        ParamRow(name, _text(first.get(name)), _text(second.get(name)))
        for name in names
    ]


def _text(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "none"
    return str(value)


def tables_compared(
    first: dict[str, Table], second: dict[str, Table]
) -> list[TablePair]:
    """Pair the runs' tables by name: the first run's order, then the new ones."""
    names = list(first) + [name for name in second if name not in first]
    return [
        TablePair(
            name,
            first.get(name),
            second.get(name),
            _moved(first.get(name), second.get(name)),
        )
        for name in names
    ]


def _moved(first: Table | None, second: Table | None) -> frozenset[tuple[int, int]]:
    if first is None or second is None:
        return frozenset()
    rows_a, rows_b = first.get("rows", []), second.get("rows", [])
    moved = set()
    for r, row in enumerate(rows_b):
        for c, cell in enumerate(row):
            before = rows_a[r][c] if r < len(rows_a) and c < len(rows_a[r]) else None
            if cell != before:
                moved.add((r, c))
    return frozenset(moved)


def chart_pair(
    chart: Chart, first: Table | None, second: Table | None
) -> tuple[dict[str, object], Table] | None:
    """Return a chart spec and table that draw both runs' values of ``chart``.

    Without ``split`` the categories are the label column's values (in the first
    run's order, then new ones) and each value column becomes two series, "col · A"
    and "col · B". With ``split`` each row is already a series: the second run's rows
    follow the first's, their labels prefixed with the run's name.
    """
    if first is None or second is None:
        return None
    spec = chart.as_json()
    if chart.split:
        table = {
            "columns": list(first["columns"]),
            "rows": _prefixed(chart, first, FIRST) + _prefixed(chart, second, SECOND),
        }
        return spec, table
    values = [f"{column} · {run}" for column in chart.values for run in (FIRST, SECOND)]
    by_label = [_by_label(chart, first), _by_label(chart, second)]
    labels = list(by_label[0]) + [x for x in by_label[1] if x not in by_label[0]]
    rows = [
        [
            label,
            *(
                by_label[i].get(label, {}).get(column)
                for column in chart.values
                for i in (0, 1)
            ),
        ]
        for label in labels
    ]
    return {**spec, "values": values}, {"columns": [chart.label, *values], "rows": rows}


def _by_label(chart: Chart, table: Table) -> dict[Cell, dict[str, Cell]]:
    columns = list(table["columns"])
    if chart.label not in columns:
        return {}
    at = columns.index(chart.label)
    present = [column for column in chart.values if column in columns]
    return {
        row[at]: {column: row[columns.index(column)] for column in present}
        for row in table["rows"]
    }


def _prefixed(chart: Chart, table: Table, run: str) -> list[list[Cell]]:
    columns = list(table["columns"])
    at = columns.index(chart.label) if chart.label in columns else 0
    return [
        [f"{run} {cell}" if i == at else cell for i, cell in enumerate(row)]
        for row in table["rows"]
    ]
