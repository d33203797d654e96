"""The shape every lab shares: typed parameters, tables, charts and the run itself.

A lab is data plus its two parts. The ``model`` part reproduces the lesson's
experiment with its own throwaway data; the ``live`` part asks the running system the
same question. Both read the lab's parameters through a frozen dataclass of their own
(``LabParams``: one typed field per ``Param``, checked against the list at import) and
return tables in the contract of ``docs/labs.md``.

A live part (``LivePart``) is three functions, each with one job:

- ``check(params) -> str | None``: what it cannot run (a value only the model can,
  more than real processes can take), as one line naming the parameter. The form and
  the request for a run ask it before anything is queued or started;
- ``measure(params, progress) -> measurement``: start what it needs (through the
  harness), ask the real system, and return the raw figures as a dataclass;
- ``tables(params, measurement) -> Tables``: build the tables, a pure function, so
  tests check them without a process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Generic, Literal, Self, TypedDict, TypeVar, get_type_hints

Cell = int | float | str | None
ParamValue = int | float | str | list[int]
Params = dict[str, ParamValue]
# fraction done in [0, 1] and a short label of the step that is starting
Progress = Callable[[float, str], None]
ParamKind = Literal["int", "float", "int_list", "str"]


class Table(TypedDict):
    columns: list[str]
    rows: list[list[Cell]]


Tables = dict[str, Table]


class LabResult(TypedDict):
    lesson: str
    params: Params
    tables: Tables


class LabError(Exception):
    """A problem a user can fix; the message is one line and safe to show."""


class ParamError(LabError):
    """A parameter name or value the experiment cannot run with."""


class LiveRefused(ParamError):
    """A value the model runs with but the live part cannot (``LivePart.check``)."""


def no_progress(fraction: float, label: str) -> None:
    """Progress callback that ignores every report (command line, tests)."""


def table(columns: list[str], rows: list[list[Cell]]) -> Table:
    """Build a table, checking every row has one cell per column."""
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"row {row!r} does not match columns {columns!r}")
    return {"columns": list(columns), "rows": [list(row) for row in rows]}


def clean_cell(value: object) -> Cell:
    """Return a cell as the contract prints it: whole floats as ints, NaN as None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError("a table cell cannot be a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() else value
    raise TypeError(f"a table cell cannot be {type(value).__name__}")


def clean_tables(tables: Tables) -> Tables:
    return {
        name: {
            "columns": list(t["columns"]),
            "rows": [[clean_cell(cell) for cell in row] for row in t["rows"]],
        }
        for name, t in tables.items()
    }


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


@dataclass(frozen=True)
class Param:
    """One typed parameter with its default and the range the experiment accepts."""

    name: str
    kind: ParamKind
    default: ParamValue
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    # True when the minimum itself is not allowed (a timeout of 0 cannot run).
    exclusive_minimum: bool = False
    # int_list: the fewest values; 0 lets an empty list ("" or "none") mean "none".
    min_items: int = 1
    max_items: int = 12
    max_length: int = 200
    # How the run's work grows with this parameter (course.policies.run_cost): with
    # its value (requests, messages), with how many values its list holds (one
    # replay per capacity), or not at all (a seed, a timeout).
    work: Literal["value", "count"] | None = None

    def parse(self, text: str) -> ParamValue:
        """Turn command-line or form text into a checked value."""
        raw = text.strip()
        if self.kind == "int":
            return self.check(self._parse_int(raw))
        if self.kind == "float":
            try:
                number = float(raw)
            except ValueError:
                raise ParamError(f"{self.name}: {raw!r} is not a number") from None
            return self.check(number)
        if self.kind == "int_list":
            if raw.lower() in ("", "none"):
                if self.min_items > 0:
                    raise ParamError(f"{self.name}: give at least one whole number")
                return self.check([])
            parts = [part.strip() for part in raw.split(",")]
            return self.check([self._parse_int(part) for part in parts])
        return self.check(raw)

    def _parse_int(self, raw: str) -> int:
        try:
            return int(raw, 10)
        except ValueError:
            raise ParamError(f"{self.name}: {raw!r} is not a whole number") from None

    def check(self, value: object) -> ParamValue:
        """Check a value that already has a type (defaults, JSON stored in a job)."""
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ParamError(f"{self.name}: must be a whole number, got {value!r}")
            self._check_range(value)
            return value
        if self.kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ParamError(f"{self.name}: must be a number, got {value!r}")
            number = float(value)
            if not math.isfinite(number):
                raise ParamError(f"{self.name}: must be a finite number")
            self._check_range(number)
            return number
        if self.kind == "int_list":
            if not isinstance(value, list):
                raise ParamError(f"{self.name}: must be a list of whole numbers")
            if len(value) < self.min_items:
                raise ParamError(
                    f"{self.name}: give at least {self.min_items} whole number"
                    + ("" if self.min_items == 1 else "s")
                )
            if len(value) > self.max_items:
                raise ParamError(f"{self.name}: at most {self.max_items} values")
            items: list[int] = []
            for item in value:
                if isinstance(item, bool) or not isinstance(item, int):
                    raise ParamError(f"{self.name}: {item!r} is not a whole number")
                self._check_range(item)
                items.append(item)
            return items
        if not isinstance(value, str):
            raise ParamError(f"{self.name}: must be text, got {value!r}")
        if not value or len(value) > self.max_length:
            raise ParamError(f"{self.name}: must be 1 to {self.max_length} characters")
        return value

    def _check_range(self, number: float) -> None:
        low, high = self.minimum, self.maximum
        if low is not None:
            if self.exclusive_minimum and number <= low:
                raise ParamError(
                    f"{self.name}: must be greater than {_number_text(low)}, "
                    f"got {_number_text(number)}"
                )
            if number < low:
                raise ParamError(
                    f"{self.name}: must be at least {_number_text(low)}, "
                    f"got {_number_text(number)}"
                )
        if high is not None and number > high:
            raise ParamError(
                f"{self.name}: must be at most {_number_text(high)}, "
                f"got {_number_text(number)}"
            )

    def text(self, value: ParamValue) -> str:
        """Return the value as a user would type it (form fields, listings)."""
        if isinstance(value, list):
            return ",".join(str(item) for item in value) if value else "none"
        if isinstance(value, float):
            return _number_text(value)
        return str(value)

    def describe_range(self) -> str:
        """Return a short human description of the accepted values."""
        low, high = self.minimum, self.maximum
        bits = []
        if low is not None:
            sign = ">" if self.exclusive_minimum else "≥"
            bits.append(f"{sign} {_number_text(low)}")
        if high is not None:
            bits.append(f"≤ {_number_text(high)}")
        kind = {
            "int": "whole number",
            "float": "number",
            "int_list": "comma-separated whole numbers",
            "str": "text",
        }[self.kind]
        text = f"{kind}, {' and '.join(bits)}" if bits else kind
        if self.kind == "int_list" and self.min_items == 0:
            text += ", or none"
        return text


@dataclass(frozen=True)
class Chart:
    """Which numbers of a table the lesson page draws.

    ``label`` names the category column and ``values`` the numeric columns (one bar
    series each). With ``split`` the single value column holds space-separated numbers
    (``depths``): each row becomes a series and the positions become the categories.
    """

    table: str
    label: str
    values: tuple[str, ...]
    title: str
    unit: str = ""
    split: bool = False
    category_prefix: str = (
        ""  # with split: how to name position n ("round " -> round 1)
    )

    def as_json(self) -> dict[str, object]:
        return {
            "table": self.table,
            "label": self.label,
            "values": list(self.values),
            "title": self.title,
            "unit": self.unit,
            "split": self.split,
            "categoryPrefix": self.category_prefix,
        }


# The Python type of each kind of parameter: what a ``LabParams`` field declares.
KIND_TYPES: dict[ParamKind, object] = {
    "int": int,
    "float": float,
    "int_list": list[int],
    "str": str,
}


@dataclass(frozen=True)
class LabParams:
    """A lab's parameters, typed: subclass it with one field per ``Param``.

    ``of`` builds it from checked values (``Lab.validate``); a lab's parts read
    ``params.requests`` instead of looking a name up. ``Lab`` checks at import that the
    fields are exactly the lab's parameters, each of its kind's type.
    """

    @classmethod
    def of(cls, values: Mapping[str, ParamValue]) -> Self:
        """Return the typed parameters of checked ``values`` (one per field)."""
        hints = get_type_hints(cls)
        typed: dict[str, Any] = {
            item.name: _typed(item.name, hints[item.name], values[item.name])
            for item in fields(cls)
        }
        return cls(**typed)

    @classmethod
    def mismatch(cls, params: tuple[Param, ...]) -> str | None:
        """Return how the fields differ from ``params``, or None when they match."""
        hints = get_type_hints(cls)
        declared = {item.name: hints[item.name] for item in fields(cls)}
        wanted = {param.name: KIND_TYPES[param.kind] for param in params}
        if declared == wanted:
            return None
        missing = sorted(set(wanted) - set(declared))
        extra = sorted(set(declared) - set(wanted))
        wrong = sorted(
            name
            for name in set(wanted) & set(declared)
            if wanted[name] != declared[name]
        )
        return f"missing {missing}, extra {extra}, of the wrong type {wrong}"


def _typed(name: str, hint: object, value: ParamValue) -> object:
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamError(f"{name}: must be a whole number")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ParamError(f"{name}: must be a number")
        return float(value)
    if hint == list[int]:
        if not isinstance(value, list):
            raise ParamError(f"{name}: must be a list of whole numbers")
        return list(value)
    if not isinstance(value, str):
        raise ParamError(f"{name}: must be text")
    return value


def accepts_all(params: LabParams) -> str | None:
    """The ``check`` of a live part that runs every value its model runs."""
    return None


P = TypeVar("P", bound=LabParams)
M = TypeVar("M")


@dataclass(frozen=True)
class LivePart(Generic[P, M]):
    """A lab's live part: what it accepts, what it measures, the tables it builds."""

    check: Callable[[P], str | None]
    measure: Callable[[P, Progress], M]
    tables: Callable[[P, M], Tables]

    def run(self, params: P, progress: Progress) -> Tables:
        """Refuse what ``check`` refuses; else measure and build the tables."""
        reason = self.check(params)
        if reason:
            raise LiveRefused(reason)
        return self.tables(params, self.measure(params, progress))


@dataclass(frozen=True)
class Lab(Generic[P]):
    """A lesson's experiment: parameters, a model part and a live part."""

    slug: str
    title: str
    params: tuple[Param, ...]
    # The typed view of ``params`` both parts take (one field per parameter).
    params_type: type[P]
    model: Callable[[P, Progress], Tables]
    live: LivePart[P, Any]
    charts: tuple[Chart, ...] = ()
    # Tables of (label, line) rows the page shows as a monospace transcript, one
    # block per label (a raw stream as it came over the wire).
    transcripts: tuple[str, ...] = ()
    # Cross-parameter rule: return a one-line reason when the combination cannot run.
    combination_check: Callable[[P], str | None] | None = None
    notes: str = ""
    _by_name: dict[str, Param] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {param.name: param for param in self.params}
        if len(by_name) != len(self.params):
            raise ValueError(f"lab {self.slug}: duplicate parameter names")
        for param in self.params:
            param.check(param.default)  # a wrong default is a bug; fail at import
        mismatch = self.params_type.mismatch(self.params)
        if mismatch:
            raise TypeError(
                f"lab {self.slug}: {self.params_type.__name__} does not match its "
                f"parameters: {mismatch}"
            )
        object.__setattr__(self, "_by_name", by_name)

    def param(self, name: str) -> Param:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(self._by_name) or "none"
            raise ParamError(
                f"{self.slug} has no parameter {name!r} (parameters: {known})"
            ) from None

    def defaults(self) -> Params:
        return {param.name: _copy(param.default) for param in self.params}

    def resolve(self, overrides: Mapping[str, str]) -> Params:
        """Return defaults with textual overrides (``--set``, form fields) applied."""
        values = self.defaults()
        for name, text in overrides.items():
            values[name] = self.param(name).parse(text)
        return self._combined(values)

    def validate(self, values: Mapping[str, object]) -> Params:
        """Check already-typed values (a job's stored params); missing ones default."""
        checked = self.defaults()
        for name, value in values.items():
            checked[name] = self.param(name).check(value)
        return self._combined(checked)

    def _combined(self, values: Params) -> Params:
        if self.combination_check is not None:
            reason = self.combination_check(self.typed(values))
            if reason:
                raise ParamError(reason)
        return values

    def typed(self, params: Params) -> P:
        """Return checked ``params`` as the lab's typed parameters."""
        return self.params_type.of(params)

    def live_refusal(self, params: Params) -> str | None:
        """Return why the live part cannot run ``params`` (one line), or None."""
        return self.live.check(self.typed(params))

    def live_run(self, params: Params, progress: Progress = no_progress) -> Tables:
        """Run the live part here (the sandbox's child does); refuse what it cannot."""
        return self.live.run(self.typed(params), progress)

    def run(
        self, params: Params, *, live: bool = False, progress: Progress = no_progress
    ) -> LabResult:
        """Run the model part (and the live part with ``live``) on checked params.

        A live run the live part refuses is refused before the model starts.
        """
        typed = self.typed(params)
        if live and (reason := self.live.check(typed)):
            raise LiveRefused(reason)
        tables = dict(self.model(typed, progress))
        if live:
            tables.update(self.live.run(typed, progress))
        progress(1.0, "done")
        return {
            "lesson": self.slug,
            "params": {name: _clean_param(value) for name, value in params.items()},
            "tables": clean_tables(tables),
        }


def _copy(value: ParamValue) -> ParamValue:
    return list(value) if isinstance(value, list) else value


def _clean_param(value: ParamValue) -> ParamValue:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return _copy(value)
