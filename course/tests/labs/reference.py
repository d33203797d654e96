"""What the labs' independent re-implementations share, written differently on purpose.

Nothing here or in the ``reference_<lab>.py`` modules beside it imports
``course/labs``. ``Generator`` reproduces the course's double rounding with exact
integers plus one int->float conversion and ``to_fixed_1`` rounds through Fractions
of the double; ``draws`` is the same generator as a generator function, which the
cache-strategies and invalidation workloads (``operations``, on a SQLite shelf:
``shelf_db``) are built from; ``fixed`` prints a messaging lab's number as the
course's ``toFixed`` does.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from fractions import Fraction

A, C, M = 1103515245, 12345, 2**31


class Generator:
    """The course's generator; the state is always an integer-valued double.

    ``float(state * A)`` rounds the exact product to the nearest double, which is what
    IEEE multiplication of two exactly representable integers does; the sum with C is
    then a double addition, and the remainder of an integer-valued double is exact.
    """

    def __init__(self, seed: int) -> None:
        self.state = seed

    def next(self) -> float:
        self.state = int(float(self.state * A) + float(C)) % M
        return self.state / M

    def pick(self, n: int) -> int:
        return math.floor(self.next() * n)


def to_fixed_1(value: float) -> float | None:
    """Number(value.toFixed(1)) via Fractions: the exact double, ties away from zero."""
    if math.isnan(value):
        return None
    exact = Fraction(value)
    sign = -1 if exact < 0 else 1
    tenths = math.floor(abs(exact) * 10 + Fraction(1, 2))
    return float(Fraction(sign * tenths, 10))


MUL, INC, MOD = 1103515245, 12345, 2**31


def draws(seed: int) -> Iterator[float]:
    """Yield the course's generator values in [0, 1).

    ``float(x * MUL)`` rounds the exact product to a double as JavaScript's
    multiplication does; adding the increment is a second double rounding.
    """
    x = seed
    while True:
        x = int(float(x * MUL) + INC) % MOD
        yield x / MOD


def operations(
    ops: int, seed: int, write_ratio: float, books: int
) -> list[tuple[str, int, int]]:
    rnd = draws(seed)
    out = []
    for _ in range(ops):
        write = next(rnd) < write_ratio
        book = int(next(rnd) * books) + 1
        step = (-1 if next(rnd) < 0.5 else 1) if write else 0
        out.append(("write" if write else "read", book, step))
    return out


def shelf_db(with_outbox: bool = False) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE shelf (id INTEGER PRIMARY KEY, copies INTEGER)")
    db.executemany("INSERT INTO shelf VALUES (?, 3)", [(i,) for i in range(1, 61)])
    if with_outbox:
        db.execute(
            "CREATE TABLE outbox (id INTEGER PRIMARY KEY, book INTEGER,"
            " done INTEGER DEFAULT 0)"
        )
    return db


def shelf_copies(db: sqlite3.Connection, book: int) -> int:
    row = db.execute("SELECT copies FROM shelf WHERE id = ?", (book,)).fetchone()
    return int(row[0])


Row = list[object]


def fixed(value: float | Fraction, digits: int) -> float:
    """Number(value.toFixed(digits)) for non-negative values, ties away from zero."""
    exact = Fraction(value)
    assert exact >= 0
    scale = 10**digits
    return float(Fraction(math.floor(exact * scale + Fraction(1, 2)), scale))
