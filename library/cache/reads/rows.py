"""Helpers shared by the cached reads: the absent-row signal, page numbers, dates,
and ``Page`` objects rebuilt from cached rows.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, overload

from django.core.paginator import Page, Paginator

from library import selectors


class Absent(Exception):
    """The origin has no such row: nothing is stored, the caller answers None."""


def canonical_page_number(raw: selectors.PageNumber) -> int:
    # Canonical before it reaches the key: "01", "1" and a missing page are one page,
    # and garbage is page 1 (as Paginator.get_page would answer anyway).
    try:
        number = int(raw or 1)
    except (TypeError, ValueError):
        return 1
    return max(number, 1)


# The catalogue searches with ``icontains``, which both databases apply without
# regard to the case of ASCII letters; other letters keep their case, since SQLite's
# LIKE folds only ASCII.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def search_canonical(text: str) -> str:
    """Return the form of a cleaned search text that every equal search shares.

    "ROSE" and "rose" find the same books, so they are one key, not two.
    """
    return text.translate(_ASCII_LOWER)


def last_page_number(count: int, per_page: int) -> int:
    """Return the number of the last page of ``count`` rows (1 when there are none)."""
    return max(1, -(-count // per_page))


def iso_or_none(moment: datetime.datetime | datetime.date | None) -> str | None:
    return None if moment is None else moment.isoformat()


def parse_datetime(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def parse_date(text: str | None) -> datetime.date | None:
    return None if text is None else datetime.date.fromisoformat(text)


class _Rows(Sequence[Any]):
    """The cached rows of one page, posing as the whole list for ``Paginator``.

    ``Paginator`` only asks for the length and for the slice of the page it builds,
    which is exactly the cached rows.
    """

    def __init__(self, rows: list[Any], count: int) -> None:
        self._rows = rows
        self._count = count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._rows
        raise IndexError("only the cached page can be read")


def page_of_rows(rows: list[Any], count: int, number: int, per_page: int) -> Page[Any]:
    paginator = Paginator(_Rows(rows, count), per_page)
    return paginator.page(number) if count else paginator.get_page(1)
