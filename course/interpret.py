"""What a learner's run says: the parameters moved, the figures that moved with them,
the live tables beside the model's, and the prediction against the measured value.

Pure functions of the lab, the lesson text and the stored result; the page renders
what they return (``templates/course/_interpretation.html``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from course.labs.harness.base import Cell, Lab, Params, Table, Tables, clean_cell
from course.textbook import LessonText, cell_text, default_tables, row_index, table_cell

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
class LivePair:
    name: str
    live_name: str
    model: Table
    live: Table


def _figure(value: float | None) -> str:
    """Return a figure as the tables print it (8.8, 53, not 8.80 or 53.0)."""
    if value is None:
        return "—"
    return cell_text(clean_cell(round(value, 3)))


@dataclass(frozen=True)
class PredictionCheck:
    prompt: str
    unit: str
    predicted: float
    model: float | None
    live: float | None

    @property
    def predicted_text(self) -> str:
        return _figure(self.predicted)

    @property
    def model_text(self) -> str:
        return _figure(self.model)

    @property
    def live_text(self) -> str:
        return _figure(self.live)

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
    live_pairs: tuple[LivePair, ...]
    live_text: str
    prediction: PredictionCheck | None

    @property
    def defaults(self) -> bool:
        return not self.changes


def _changes(lab: Lab, params: Params, text: LessonText | None) -> list[ParamChange]:
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


def _counterpart(before: Table, row: list[Cell], index: int) -> list[Cell] | None:
    """Return the default row to compare ``row`` with: same label, else same place."""
    if row and isinstance(row[0], str):
        match = row_index(before, row[0])
        if match is not None:
            return before["rows"][match]
    return before["rows"][index] if index < len(before["rows"]) else None


def _moved_in(name: str, before: Table, after: Table) -> list[Moved]:
    if before["columns"] != after["columns"]:
        return []
    moved = []
    for index, row in enumerate(after["rows"]):
        old = _counterpart(before, row, index)
        if old is None:
            continue
        label = str(row[0]) if row else f"#{index}"
        for column, new_cell, old_cell in zip(before["columns"], row, old, strict=True):
            if new_cell == old_cell:
                continue
            new, prior = _number(new_cell), _number(old_cell)
            change = None
            if new is not None and prior is not None and prior != 0:
                change = round((new - prior) / abs(prior) * 100, 1)
            moved.append(
                Moved(
                    name,
                    label,
                    column,
                    cell_text(old_cell),
                    cell_text(new_cell),
                    change,
                )
            )
    return moved


def _moved(slug: str, tables: Tables, published: tuple[str, ...]) -> list[Moved]:
    defaults = default_tables(slug)
    order = [n for n in published if n in tables] + [
        n for n in tables if n not in published and not n.startswith(LIVE_PREFIX)
    ]
    found: list[Moved] = []
    for name in order:
        if name in defaults:
            found += _moved_in(name, defaults[name], tables[name])

    def weight(item: Moved) -> tuple[int, float]:
        return (0 if item.table in published else 1, -abs(item.change_pct or math.inf))

    return sorted(found, key=weight)


def _live_pairs(tables: Tables) -> list[LivePair]:
    pairs = []
    for name, live in tables.items():
        if name.startswith(LIVE_PREFIX) and name[len(LIVE_PREFIX) :] in tables:
            model_name = name[len(LIVE_PREFIX) :]
            pairs.append(LivePair(model_name, name, tables[model_name], live))
    return pairs


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

    return PredictionCheck(
        prompt=spec.prompt,
        unit=spec.unit,
        predicted=predicted,
        model=value(spec.table),
        live=value(LIVE_PREFIX + spec.table),
    )


def run_interpret(
    *,
    lab: Lab,
    text: LessonText | None,
    params: Params,
    tables: Tables,
    predicted: float | None,
) -> Interpretation:
    """Explain one finished run against the lab's defaults."""
    moved = _moved(lab.slug, tables, text.tables if text is not None else ())
    return Interpretation(
        changes=tuple(_changes(lab, params, text)),
        moved=tuple(moved[:MAX_MOVED]),
        moved_total=len(moved),
        live_pairs=tuple(_live_pairs(tables)),
        live_text=text.live if text is not None else "",
        prediction=_prediction(text, tables, predicted),
    )
