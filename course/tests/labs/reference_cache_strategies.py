"""A second implementation of the cache-strategies model, written another way.

Nothing here is shared with ``course/labs`` or ``library.cache``: the workload is a
generator function over exact integers (rounded to a double where JavaScript would
round), the origin lives in SQLite like the course's does, and one loop with a
``mode`` switch replaces the strategy classes.
"""

from __future__ import annotations

from course.tests.labs.reference import operations, shelf_copies, shelf_db


def strategies(
    ops: int, seed: int, write_ratio: float, hot_books: int, flush_every: int
) -> list[list[object]]:
    work = operations(ops, seed, write_ratio, hot_books)
    result: list[list[object]] = []
    for mode in ("cache-aside", "write-through", "write-behind"):
        db = shelf_db()
        reads = writes = hit = miss = stale = 0
        cache: dict[int, int] = {}
        known: dict[int, int] = {}
        queue: dict[int, int] = {}
        write_count = 0
        for kind, book, step in work:
            if book not in known:
                known[book] = shelf_copies(db, book)
            if kind == "read":
                if book in cache:
                    hit += 1
                else:
                    miss += 1
                    reads += 1
                    cache[book] = shelf_copies(db, book)
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
        diverged = sum(shelf_copies(db, b) != v for b, v in known.items())
        db.close()
        result.append([mode, reads, writes, hit, miss, stale, len(queue), diverged])
    return result
