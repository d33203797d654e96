"""The small expression language of a challenge: conditions and figures on a run.

A challenge names what it checks as an expression over one run of the lab's model:

- ``depth[#0].final_depth`` is a cell (table, row, column), as the lesson's
  placeholders write it: the row is the text of its first cell or ``#n``
  (``#-1`` the last row);
  ``chain[edge].requests@edge_capacity=0`` is that cell in the same run with some
  parameters changed (``@a=1@b=2``; a list's values joined by ``;``);
- a bare name is one of the run's parameters (``workers``; a list parameter is a
  list, so ``workers[0]`` is its first value);
- numbers, strings in double quotes, ``+ - * / // %``, comparisons (chains too),
  ``and``, ``or``, ``not``, indexing and slicing (``run_1[8:10]``, the day of a
  date cell) and the functions ``abs min max len sum round int float``.

Nothing else parses: no attributes, no other calls, no names but parameters. The
module is pure (no I/O): :func:`evaluate` takes the tables and parameters.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from course.labs.harness.base import Cell, Params, Tables

# table[row].column, then any @name=value; the row may hold anything but "]".
CELL = re.compile(
    r"([a-z][a-z0-9_]*)\[([^\]]+)\]\.([a-z][a-z0-9_]*)"
    r"((?:@[a-z][a-z0-9_]*=[^\s@),]+)*)"
)
_SLOT = "cell_ref_{}"


class ExprError(Exception):
    """An expression that does not parse, or names what the run does not have."""


class NoValue(ExprError):
    """A cell the run leaves empty (printed as a dash): nothing to compare."""


@dataclass(frozen=True)
class CellRef:
    table: str
    row: str
    column: str
    # Parameters changed from the run's own, as text: (("edge_capacity", "0"),).
    changes: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        changed = "".join(f"@{name}={value}" for name, value in self.changes)
        return f"{self.table}[{self.row}].{self.column}{changed}"


@dataclass(frozen=True)
class Parsed:
    """An expression with its cells taken out: ``tree`` names them ``cell_ref_<n>``."""

    source: str
    tree: ast.expr
    cells: tuple[CellRef, ...]
    names: frozenset[str]


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "len": len,
    "sum": sum,
    "round": round,
    "int": int,
    "float": float,
}
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
COMPARE_TEXT: dict[type[ast.cmpop], str] = {
    ast.Lt: "<",
    ast.LtE: "≤",
    ast.Gt: ">",
    ast.GtE: "≥",
    ast.Eq: "=",
    ast.NotEq: "≠",
}


def parse(source: str) -> Parsed:
    """Parse ``source``; raise ExprError saying what is not allowed."""
    cells: list[CellRef] = []

    def slot(match: re.Match[str]) -> str:
        changes = tuple(
            (name, value.replace(";", ","))
            for name, _, value in (
                part.partition("=") for part in match.group(4).split("@")[1:]
            )
        )
        cells.append(
            CellRef(match.group(1), match.group(2).strip(), match.group(3), changes)
        )
        return _SLOT.format(len(cells) - 1)

    text = CELL.sub(slot, source.strip())
    if not text:
        raise ExprError("an empty expression")
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise ExprError(f"{source!r} does not parse") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        _allowed(node, source)
        if (
            isinstance(node, ast.Name)
            and not node.id.startswith("cell_ref_")
            and node.id not in _FUNCTIONS
        ):
            names.add(node.id)
    return Parsed(source.strip(), tree, tuple(cells), frozenset(names))


_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.Call,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Subscript,
    ast.Slice,
    ast.List,
    ast.Tuple,
    ast.And,
    ast.Or,
    ast.Not,
    ast.USub,
    ast.UAdd,
    *_BINARY,
    *_COMPARE,
)


def _allowed(node: ast.AST, source: str) -> None:
    if not isinstance(node, _NODES):
        raise ExprError(f"{source!r}: {type(node).__name__} is not allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise ExprError(f"{source!r}: only {', '.join(_FUNCTIONS)} may be called")
        if node.keywords:
            raise ExprError(f"{source!r}: no keyword arguments")
    if isinstance(node, ast.Constant) and not isinstance(
        node.value, int | float | str | bool
    ):
        raise ExprError(f"{source!r}: {node.value!r} is not a number or a string")


def cell_value(tables: Tables, ref: CellRef) -> Cell:
    """Return the cell ``ref`` names; raise ExprError saying what is missing."""
    table = tables.get(ref.table)
    if table is None:
        raise ExprError(f"the run has no table {ref.table!r}")
    if ref.column not in table["columns"]:
        raise ExprError(f"table {ref.table!r} has no column {ref.column!r}")
    index = _row_index(table["rows"], ref.row)
    if index is None:
        raise ExprError(f"table {ref.table!r} has no row {ref.row!r}")
    return table["rows"][index][table["columns"].index(ref.column)]


def _row_index(rows: list[list[Cell]], key: str) -> int | None:
    if key.startswith("#"):
        try:
            index = int(key[1:])
        except ValueError:
            return None
        if index < 0:  # "#-1": the last row
            index += len(rows)
        return index if 0 <= index < len(rows) else None
    for index, row in enumerate(rows):
        if row and str(row[0]) == key:
            return index
    return None


@dataclass(frozen=True)
class Context:
    """One run: its parameters and the model's tables, and how to run it again
    with some parameters changed (for cells written with ``@name=value``)."""

    params: Params
    tables: Tables
    rerun: Callable[[Mapping[str, str]], Tables] | None = None


def evaluate(parsed: Parsed, context: Context) -> Any:
    """Evaluate ``parsed`` on one run; raise ExprError (NoValue for an empty cell)."""
    values: dict[str, Any] = {}
    for number, ref in enumerate(parsed.cells):
        tables = context.tables
        if ref.changes:
            if context.rerun is None:
                raise ExprError(f"{ref.text}: no other run can be made here")
            tables = context.rerun(dict(ref.changes))
        value = cell_value(tables, ref)
        if value is None:
            raise NoValue(f"{ref.text} has no value in this run")
        values[_SLOT.format(number)] = value
    for name in parsed.names:
        if name not in context.params:
            raise ExprError(f"{parsed.source!r}: no parameter {name!r}")
        values[name] = context.params[name]
    try:
        return _eval(parsed.tree, values)
    except (TypeError, ZeroDivisionError, IndexError, ValueError) as error:
        raise ExprError(f"{parsed.source!r}: {error}") from None


def _eval(node: ast.expr, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(item, values) for item in node.elts]
    if isinstance(node, ast.Subscript):
        return _eval(node.value, values)[_index(node.slice, values)]
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values)
        if isinstance(node.op, ast.Not):
            return not operand
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](
            _eval(node.left, values), _eval(node.right, values)
        )
    if isinstance(node, ast.BoolOp):
        results = [_eval(value, values) for value in node.values]
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return _FUNCTIONS[node.func.id](*(_eval(arg, values) for arg in node.args))
    raise ExprError(f"{type(node).__name__} is not allowed")  # pragma: no cover


def _index(node: ast.expr, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Slice):
        parts = (node.lower, node.upper, node.step)
        return slice(*(None if p is None else _eval(p, values) for p in parts))
    return _eval(node, values)


def number_text(value: object) -> str:
    """Return a figure as the lesson prints it: thousands separated."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer():
            return f"{int(value):,}"
        return f"{round(value, 3):,}"
    if isinstance(value, list):
        return ",".join(number_text(item) for item in value)
    return str(value)


def operand_text(node: ast.expr, parsed: Parsed) -> str:
    """Return the source of one part of ``parsed`` with its cells written back."""
    text = ast.unparse(node)
    for number, ref in enumerate(parsed.cells):
        text = re.sub(rf"\b{_SLOT.format(number)}\b", ref.text, text)
    return text


def _value_text(node: ast.expr, parsed: Parsed, context: Context) -> str:
    sub = Parsed(parsed.source, node, parsed.cells, parsed.names)
    try:
        return number_text(evaluate(sub, context))
    except NoValue:
        return "empty (—)"


def describe(parsed: Parsed, context: Context) -> str:
    """Say what a condition came to in this run, for a learner.

    ``depth[#0].final_depth <= 3`` becomes "depth[#0].final_depth is 14; the goal
    needs it ≤ 3"; a right-hand side that is not a plain number is given its value
    and its source, and a condition of another shape its parts' values.
    """
    tree = parsed.tree
    try:
        if isinstance(tree, ast.Compare) and len(tree.ops) == 1:
            left, right = tree.left, tree.comparators[0]
            need = _value_text(right, parsed, context)
            if not isinstance(right, ast.Constant):
                need += f" ({operand_text(right, parsed)})"
            return (
                f"{operand_text(left, parsed)} is "
                f"{_value_text(left, parsed, context)}; the goal needs it "
                f"{COMPARE_TEXT[type(tree.ops[0])]} {need}"
            )
        parts = [
            f"{operand_text(node, parsed)} is {_value_text(node, parsed, context)}"
            for node in ast.walk(tree)
            if isinstance(node, ast.expr) and _is_cell(node)
        ]
        return f"{'; '.join(parts)} (the goal: {operand_text(tree, parsed)})"
    except ExprError as error:
        return str(error)


def _is_cell(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id.startswith("cell_ref_")
