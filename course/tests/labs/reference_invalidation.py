"""A second implementation of the invalidation model, written another way on purpose.

Nothing here is shared with ``course/labs`` or ``library.cache``: the origin lives in
SQLite like the course's does, and the outbox is a table with a status column.
"""

from __future__ import annotations

import math

from course.tests.labs.reference import operations, shelf_copies, shelf_db


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
        db = shelf_db(with_outbox=True)
        cache: dict[tuple[int, int], tuple[int, float]] = {}
        version: dict[int, int] = {}
        reads = hit = miss = stale = 0
        for clock, (op, book, step) in enumerate(work, start=1):
            if op == "write":
                new = max(0, shelf_copies(db, book) + step)
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
                    value = shelf_copies(db, book)
                    until = clock + n if kind == "time" else math.inf
                    cache[key] = (value, until)
                stale += value != shelf_copies(db, book)
            if kind == "event" and clock % n == 0:
                pending = db.execute("SELECT id, book FROM outbox WHERE done = 0")
                for message, target in pending.fetchall():
                    cache.pop((target, 0), None)
                    db.execute("UPDATE outbox SET done = 1 WHERE id = ?", (message,))
        db.close()
        rows.append([label, reads, hit, miss, stale])
    return rows
