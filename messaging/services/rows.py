"""Model instances from the rows of a hand-written statement.

The drain's hottest statements are written by hand on PostgreSQL (one statement
where the ORM needed several, and no query to compile on every pass). Their rows
become model instances here, through the fields' own database converters, so an
instance is what the ORM would have built (a JSON body decoded, say).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from django.db import connection
from django.db.models import Model

_M = TypeVar("_M", bound=Model)
_Converter = Callable[[Any, Any, Any], Any]


def quoted(name: str) -> str:
    """Return a table or column name quoted for the current database."""
    return str(connection.ops.quote_name(name))


def table(model: type[Model]) -> str:
    return quoted(model._meta.db_table)


def column(model: type[Model], field: str) -> str:
    """Return the quoted column of ``model``'s field ``field`` (a name or attname)."""
    return quoted(model._meta.get_field(field).column)  # type: ignore[union-attr,arg-type]


class RowReader(Generic[_M]):
    """Read ``model``'s concrete columns (under ``alias``) into instances."""

    def __init__(self, model: type[_M], alias: str) -> None:
        fields = model._meta.concrete_fields
        self.model = model
        self.width = len(fields)
        self.columns = ", ".join(f"{alias}.{quoted(f.column)}" for f in fields)
        self.attnames = [f.attname for f in fields]
        self._converters: list[tuple[int, list[_Converter], Any]] = []
        for at, field in enumerate(fields):
            expression = field.get_col(alias)
            converters = connection.ops.get_db_converters(
                expression
            ) + field.get_db_converters(connection)  # type: ignore[attr-defined]
            if converters:
                self._converters.append((at, converters, expression))

    def read(self, values: Sequence[Any]) -> _M:
        """Return the instance of the first ``width`` values (as the ORM builds it)."""
        row = list(values[: self.width])
        for at, converters, expression in self._converters:
            for convert in converters:
                row[at] = convert(row[at], expression, connection)
        return self.model.from_db(connection.alias, self.attnames, row)


@functools.cache
def _reader(model: type[Model], alias: str, vendor: str) -> RowReader[Any]:
    return RowReader(model, alias)


def reader(model: type[_M], alias: str) -> RowReader[_M]:
    """Return the (per process) reader of ``model``'s columns under ``alias``."""
    return _reader(model, alias, connection.vendor)


def value_reader(model: type[Model], field: str, alias: str) -> Callable[[Any], Any]:
    """Return what turns one column's raw value into the field's value."""
    column = model._meta.get_field(field).get_col(alias)  # type: ignore[union-attr]
    converters = connection.ops.get_db_converters(
        column
    ) + column.target.get_db_converters(connection)  # type: ignore[union-attr]

    def read(value: Any) -> Any:
        for convert in converters:
            value = convert(value, column, connection)
        return value

    return read
