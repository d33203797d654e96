"""A second implementation of the cache-key-design cardinality experiment.

Nothing here is shared with ``course/labs`` or ``library.cache``: the cache is keyed
by tuples.
"""

from __future__ import annotations

import math
from fractions import Fraction

# branch -> titles in book order, read off the lesson's catalogue by hand
SHELVES = {
    1: ["Blindness", "The Disconnected", "Sand: Borges Selection"],
    2: ["The Book of Sand", "Yaban"],
    3: ["Silent House", "Motherland Hotel"],
}


def _page(branch: int, page: int) -> str:
    return ", ".join(SHELVES[branch][(page - 1) * 2 : page * 2])


def one_decimal(value: float) -> float | None:
    """Number(value.toFixed(1)) for non-negative doubles: the exact binary value of
    ``value``, rounded to tenths with ties going up."""
    if math.isnan(value):
        return None
    exact = Fraction(value)
    return float(Fraction(math.floor(exact * 10 + Fraction(1, 2)), 10))


def cardinality(requests: int) -> list[list[object]]:
    rows: list[list[object]] = []
    forms = {
        "correct (tenant + criteria)": lambda b, p, i: (b, p),
        "extra field (request id)": lambda b, p, i: (b, p, i),
        "missing field (no tenant)": lambda b, p, i: (p,),
    }
    for label, key_of in forms.items():
        seen: dict[tuple[int, ...], str] = {}
        hit = wrong = 0
        for i in range(requests):
            b, p = i % 3 + 1, i % 2 + 1
            key = key_of(b, p, i)
            if key in seen:
                hit += 1
            else:
                seen[key] = _page(b, p)
            wrong += seen[key] != _page(b, p)
        # The course divides in doubles first; only the rounding is done exactly.
        ratio = hit / requests * 100 if requests else math.nan
        rows.append([label, hit, requests - hit, one_decimal(ratio), wrong, len(seen)])
    return rows
