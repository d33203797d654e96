"""What a learner's run says: the parameters moved, the figures that moved with them,
the live tables beside the model's, and the prediction against the measured value.

Pure functions of the lab, the lesson text and the stored result; the page renders
what they return (``templates/course/_interpretation.html``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from course.labs.harness.base import Cell, Lab, Params, Table, Tables, clean_cell
from course.textbook import (
    Breakdown,
    LessonText,
    cell_text,
    default_tables,
    row_index,
    table_cell,
)

LIVE_PREFIX = "live_"
MAX_MOVED = 10
# A prediction within this share of the measured value counts as close.
CLOSE_SHARE = 0.1


@dataclass(frozen=True)
class ParamChange:
    name: str
    default: str
    value: str
    effect: str


@dataclass(frozen=True)
class Moved:
    table: str
    row: str
    column: str
    before: str
    after: str
    change_pct: float | None  # None when the default was 0


@dataclass(frozen=True)
class Shape:
    """How a table of the run is shaped unlike the defaults' (more shards: columns)."""

    table: str
    columns_appeared: tuple[str, ...]
    columns_gone: tuple[str, ...]
    rows_appeared: tuple[str, ...]
    rows_gone: tuple[str, ...]


@dataclass(frozen=True)
class LiveCell:
    text: str
    differs: bool  # not the model's value in the same row and (compared) column
    note: bool  # the lesson explains this column's difference


@dataclass(frozen=True)
class LivePair:
    name: str
    live_name: str
    model: Table
    live: Table
    # The live table's rows with each cell marked where it differs from the model.
    cells: tuple[tuple[LiveCell, ...], ...] = ()
    # Per live column: why live and model may differ (the lesson's [live.columns]).
    notes: tuple[tuple[str, str], ...] = ()


def figure_text(value: float | None) -> str:
    """Return a figure as the tables print it (8.8, 53, not 8.80 or 53.0)."""
    if value is None:
        return "—"
    return cell_text(clean_cell(round(value, 3)))


@dataclass(frozen=True)
class Part:
    column: str
    model: str
    live: str | None  # None when the run has no live table for it


@dataclass(frozen=True)
class PredictionCheck:
    prompt: str
    unit: str
    predicted: float
    model: float | None
    live: float | None
    # Where the figure sits and what it is made of, to explain a miss.
    table: str = ""
    row: str = ""
    column: str = ""
    breakdown_text: str = ""
    breakdown_table: str = ""
    breakdown_row: str = ""
    parts: tuple[Part, ...] = ()

    @property
    def predicted_text(self) -> str:
        return figure_text(self.predicted)

    @property
    def model_text(self) -> str:
        return figure_text(self.model)

    @property
    def live_text(self) -> str:
        return figure_text(self.live)

    @property
    def measured(self) -> float | None:
        return self.live if self.live is not None else self.model

    @property
    def off_pct(self) -> float | None:
        measured = self.measured
        if measured is None:
            return None
        if measured == 0:
            return 0.0 if self.predicted == 0 else None
        return round(abs(self.predicted - measured) / abs(measured) * 100, 1)

    @property
    def close(self) -> bool:
        off = self.off_pct
        if off is None:
            return self.measured == self.predicted
        return off <= CLOSE_SHARE * 100


@dataclass(frozen=True)
class Interpretation:
    changes: tuple[ParamChange, ...]
    moved: tuple[Moved, ...]
    moved_total: int
    shapes: tuple[Shape, ...]
    live_pairs: tuple[LivePair, ...]
    live_text: str
    prediction: PredictionCheck | None

    @property
    def defaults(self) -> bool:
        return not self.changes


def _changes(
    lab: Lab[Any], params: Params, text: LessonText | None
) -> list[ParamChange]:
    notes = text.params if text is not None else {}
    changes = []
    for param in lab.params:
        value = params.get(param.name, param.default)
        if value != param.default:
            changes.append(
                ParamChange(
                    name=param.name,
                    default=param.text(param.default),
                    value=param.text(value),
                    effect=notes.get(param.name, ""),
                )
            )
    return changes


def _number(cell: Cell) -> float | None:
    if isinstance(cell, bool) or not isinstance(cell, int | float):
        return None
    return float(cell)


def _label(row: list[Cell], index: int) -> str:
    return str(row[0]) if row else f"#{index}"


def _keyed_by_label(before: Table, after: Table) -> bool:
    """Whether rows are matched by their first cell (a label both runs share).

    A table whose first cells are text and share at least one label is keyed by it
    (``single key``, ``split into 4 copies``): a label only one run has is a row
    that appeared or went. Otherwise rows are matched by position.
    """
    labels = {str(r[0]) for r in before["rows"] if r and isinstance(r[0], str)}
    return any(r and isinstance(r[0], str) and r[0] in labels for r in after["rows"])


def _counterpart(
    before: Table, row: list[Cell], index: int, keyed: bool
) -> list[Cell] | None:
    """Return the default row to compare ``row`` with: same label, else same place."""
    if keyed:
        match = row_index(before, str(row[0])) if row else None
        return before["rows"][match] if match is not None else None
    return before["rows"][index] if index < len(before["rows"]) else None


def _change_pct(new_cell: Cell, old_cell: Cell) -> float | None:
    new, prior = _number(new_cell), _number(old_cell)
    if new is None or prior is None or prior == 0:
        return None
    return round((new - prior) / abs(prior) * 100, 1)


def _moved_in(name: str, before: Table, after: Table) -> list[Moved]:
    """Return the cells that moved, compared by column name and row label.

    A column or row only one of the two runs has cannot move; ``_shape`` names it.
    """
    keyed = _keyed_by_label(before, after)
    common = [c for c in after["columns"] if c in before["columns"]]
    moved = []
    for index, row in enumerate(after["rows"]):
        old = _counterpart(before, row, index, keyed)
        if old is None:
            continue
        for column in common:
            new_cell = row[after["columns"].index(column)]
            old_cell = old[before["columns"].index(column)]
            if new_cell == old_cell:
                continue
            moved.append(
                Moved(
                    name,
                    _label(row, index),
                    column,
                    cell_text(old_cell),
                    cell_text(new_cell),
                    _change_pct(new_cell, old_cell),
                )
            )
    return moved


def _shape(name: str, before: Table, after: Table) -> Shape | None:
    """Return how ``after`` differs from ``before`` in columns and rows, or None."""
    appeared = tuple(c for c in after["columns"] if c not in before["columns"])
    gone = tuple(c for c in before["columns"] if c not in after["columns"])
    rows_new: tuple[str, ...] = ()
    rows_gone: tuple[str, ...] = ()
    if _keyed_by_label(before, after):
        old = [_label(r, i) for i, r in enumerate(before["rows"])]
        new = [_label(r, i) for i, r in enumerate(after["rows"])]
        rows_new = tuple(label for label in new if label not in old)
        rows_gone = tuple(label for label in old if label not in new)
    else:
        count_old, count_new = len(before["rows"]), len(after["rows"])
        rows_new = tuple(f"#{i}" for i in range(count_old, count_new))
        rows_gone = tuple(f"#{i}" for i in range(count_new, count_old))
    if not (appeared or gone or rows_new or rows_gone):
        return None
    return Shape(name, appeared, gone, rows_new, rows_gone)


def _order(tables: Tables, published: tuple[str, ...]) -> list[str]:
    return [n for n in published if n in tables] + [
        n for n in tables if n not in published and not n.startswith(LIVE_PREFIX)
    ]


def _moved(slug: str, tables: Tables, published: tuple[str, ...]) -> list[Moved]:
    defaults = default_tables(slug)
    found: list[Moved] = []
    for name in _order(tables, published):
        if name in defaults:
            found += _moved_in(name, defaults[name], tables[name])

    def weight(item: Moved) -> tuple[int, float]:
        return (0 if item.table in published else 1, -abs(item.change_pct or math.inf))

    return sorted(found, key=weight)


def _shapes(slug: str, tables: Tables, published: tuple[str, ...]) -> list[Shape]:
    defaults = default_tables(slug)
    shapes = []
    for name in _order(tables, published):
        if name in defaults:
            shape = _shape(name, defaults[name], tables[name])
            if shape is not None:
                shapes.append(shape)
    return shapes


def _live_cells(
    model: Table, live: Table, compare: dict[str, str], notes: dict[str, str]
) -> tuple[tuple[LiveCell, ...], ...]:
    """Mark each live cell that differs from the model's cell of the same row label
    and the same column (or the model column ``compare`` pairs it with)."""
    keyed = _keyed_by_label(model, live)
    rows = []
    for index, row in enumerate(live["rows"]):
        twin = _counterpart(model, row, index, keyed)
        cells = []
        for position, cell in enumerate(row):
            column = live["columns"][position]
            paired = compare.get(column, column)
            differs = False
            if twin is not None and paired in model["columns"] and position > 0:
                differs = twin[model["columns"].index(paired)] != cell
            cells.append(LiveCell(cell_text(cell), differs, bool(notes.get(column))))
        rows.append(tuple(cells))
    return tuple(rows)


def _live_pairs(tables: Tables, text: LessonText | None) -> list[LivePair]:
    pairs = []
    for name, live in tables.items():
        if name.startswith(LIVE_PREFIX) and name[len(LIVE_PREFIX) :] in tables:
            model_name = name[len(LIVE_PREFIX) :]
            notes = text.live_columns.get(model_name, {}) if text else {}
            compare = text.live_compare.get(model_name, {}) if text else {}
            model = tables[model_name]
            pairs.append(
                LivePair(
                    model_name,
                    name,
                    model,
                    live,
                    cells=_live_cells(model, live, compare, notes),
                    notes=tuple(
                        (column, notes[column])
                        for column in live["columns"]
                        if notes.get(column)
                    ),
                )
            )
    return pairs


def _parts(parts: Breakdown, tables: Tables) -> tuple[Part, ...]:
    """Return the run's values of the cells the predicted figure is made of."""

    def text_of(name: str, column: str) -> str | None:
        try:
            return cell_text(table_cell(tables, name, parts.row, column))
        except KeyError:
            return None

    found = []
    for column in parts.columns:
        model = text_of(parts.table, column)
        if model is not None:
            live = text_of(LIVE_PREFIX + parts.table, column)
            found.append(Part(column, model, live))
    return tuple(found)


def _prediction(
    text: LessonText | None, tables: Tables, predicted: float | None
) -> PredictionCheck | None:
    if text is None or text.predict is None or predicted is None:
        return None
    spec = text.predict

    def value(name: str) -> float | None:
        try:
            return _number(table_cell(tables, name, spec.row, spec.column))
        except KeyError:
            return None

    parts = spec.breakdown
    return PredictionCheck(
        prompt=spec.prompt,
        unit=spec.unit,
        predicted=predicted,
        model=value(spec.table),
        live=value(LIVE_PREFIX + spec.table),
        table=spec.table,
        row=spec.row,
        column=spec.column,
        breakdown_text=parts.text if parts else "",
        breakdown_table=parts.table if parts else "",
        breakdown_row=parts.row if parts else "",
        parts=_parts(parts, tables) if parts else (),
    )


def run_interpret(
    *,
    lab: Lab[Any],
    text: LessonText | None,
    params: Params,
    tables: Tables,
    predicted: float | None,
) -> Interpretation:
    """Explain one finished run against the lab's defaults."""
    published = text.tables if text is not None else ()
    moved = _moved(lab.slug, tables, published)
    return Interpretation(
        changes=tuple(_changes(lab, params, text)),
        moved=tuple(moved[:MAX_MOVED]),
        moved_total=len(moved),
        shapes=tuple(_shapes(lab.slug, tables, published)),
        live_pairs=tuple(_live_pairs(tables, text)),
        live_text=text.live if text is not None else "",
        prediction=_prediction(text, tables, predicted),
    )
