"""Second implementations of three caching labs, written another way on purpose.

Nothing here is shared with ``course/labs`` or ``library.cache``: the workload is a
generator function over exact integers (rounded to a double where JavaScript would
round), the strategy and invalidation origins live in SQLite like the course's do,
one loop with a ``mode`` switch replaces the strategy classes, the outbox is a table
with a status column, and the cardinality experiment keys its cache by tuples.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from fractions import Fraction

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


def _shelf_db(with_outbox: bool = False) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE shelf (id INTEGER PRIMARY KEY, copies INTEGER)")
    db.executemany("INSERT INTO shelf VALUES (?, 3)", [(i,) for i in range(1, 61)])
    if with_outbox:
        db.execute(
            "CREATE TABLE outbox (id INTEGER PRIMARY KEY, book INTEGER,"
            " done INTEGER DEFAULT 0)"
        )
    return db


def _copies(db: sqlite3.Connection, book: int) -> int:
    row = db.execute("SELECT copies FROM shelf WHERE id = ?", (book,)).fetchone()
    return int(row[0])


def strategies(
    ops: int, seed: int, write_ratio: float, hot_books: int, flush_every: int
) -> list[list[object]]:
    work = operations(ops, seed, write_ratio, hot_books)
    result: list[list[object]] = []
    for mode in ("cache-aside", "write-through", "write-behind"):
        db = _shelf_db()
        reads = writes = hit = miss = stale = 0
        cache: dict[int, int] = {}
        known: dict[int, int] = {}
        queue: dict[int, int] = {}
        write_count = 0
        for kind, book, step in work:
            if book not in known:
                known[book] = _copies(db, book)
            if kind == "read":
                if book in cache:
                    hit += 1
                else:
                    miss += 1
                    reads += 1
                    cache[book] = _copies(db, book)
                stale += cache[book] != known[book]
                continue
            known[book] = max(0, known[book] + step)
            new = known[book]
            if mode == "write-behind":
                cache[book] = new
                queue[book] = new
                write_count += 1
                if write_count % flush_every == 0:
                    for b, v in queue.items():
                        writes += 1
                        db.execute("UPDATE shelf SET copies = ? WHERE id = ?", (v, b))
                    queue = {}
                continue
            writes += 1
            db.execute("UPDATE shelf SET copies = ? WHERE id = ?", (new, book))
            if mode == "cache-aside":
                cache.pop(book, None)
            else:
                cache[book] = new
        diverged = sum(_copies(db, b) != v for b, v in known.items())
        db.close()
        result.append([mode, reads, writes, hit, miss, stale, len(queue), diverged])
    return result


def invalidation(
    ops: int, seed: int, lifetimes: list[int], delays: list[int]
) -> list[list[object]]:
    work = operations(ops, seed, 0.15, 12)
    plans: list[tuple[str, str, int]] = (
        [(f"time (lifetime={n})", "time", n) for n in lifetimes]
        + [(f"event (delay={n})", "event", n) for n in delays]
        + [("version", "version", 0)]
    )
    rows: list[list[object]] = []
    for label, kind, n in plans:
        db = _shelf_db(with_outbox=True)
        cache: dict[tuple[int, int], tuple[int, float]] = {}
        version: dict[int, int] = {}
        reads = hit = miss = stale = 0
        for clock, (op, book, step) in enumerate(work, start=1):
            if op == "write":
                new = max(0, _copies(db, book) + step)
                with db:
                    db.execute("UPDATE shelf SET copies = ? WHERE id = ?", (new, book))
                    db.execute("INSERT INTO outbox (book) VALUES (?)", (book,))
                version[book] = version.get(book, 1) + 1
            else:
                key = (book, version.get(book, 1) if kind == "version" else 0)
                held = cache.get(key)
                if held is not None and held[1] > clock:
                    hit += 1
                    value = held[0]
                else:
                    miss += 1
                    reads += 1
                    value = _copies(db, book)
                    until = clock + n if kind == "time" else math.inf
                    cache[key] = (value, until)
                stale += value != _copies(db, book)
            if kind == "event" and clock % n == 0:
                pending = db.execute("SELECT id, book FROM outbox WHERE done = 0")
                for message, target in pending.fetchall():
                    cache.pop((target, 0), None)
                    db.execute("UPDATE outbox SET done = 1 WHERE id = ?", (message,))
        db.close()
        rows.append([label, reads, hit, miss, stale])
    return rows


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
