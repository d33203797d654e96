"""An independent re-implementation of the cache-metrics lab.

Nothing here imports ``course/labs``: it runs the real SQL against an in-memory SQLite
copy of the lesson's setup, and the LRU is an OrderedDict.
"""

from __future__ import annotations

import json
import sqlite3
from collections import OrderedDict
from functools import cache
from typing import Any

from course.tests.labs.reference import Generator, to_fixed_1


@cache
def _database() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.row_factory = lambda cursor, row: {
        col[0]: value for col, value in zip(cursor.description, row, strict=True)
    }
    db.execute(
        "CREATE TABLE book (book_id INT PRIMARY KEY, title, author, "
        "publication_year INT, branch_id INT)"
    )
    db.execute(
        "CREATE TABLE loan (loan_id INT PRIMARY KEY, book_id INT, "
        "member_id INT, return_date)"
    )
    db.executemany(
        "INSERT INTO book VALUES (?, ?, ?, ?, ?)",
        [
            (n, f"Book {n}", f"Author {n % 40 + 1}", 1950 + n % 70, n % 4 + 1)
            for n in range(1, 301)
        ],
    )
    db.executemany(
        "INSERT INTO loan VALUES (?, ?, ?, ?)",
        [
            (n, n % 300 + 1, n % 200 + 1, None if n % 5 == 0 else "2025-12-31")
            for n in range(1, 4001)
        ],
    )
    return db


SQL = {
    "book_year": (
        "SELECT b.book_id, b.title, b.author, b.publication_year"
        " FROM book AS b WHERE b.book_id = ?"
    ),
    "book": "SELECT b.book_id, b.title, b.author FROM book AS b WHERE b.book_id = ?",
    "stock": (
        "SELECT ? AS branch_id, "
        "(SELECT count(*) FROM book WHERE branch_id = ?) - "
        "(SELECT count(DISTINCT b.book_id) FROM book b"
        " JOIN loan l ON l.book_id = b.book_id"
        " WHERE b.branch_id = ? AND l.return_date IS NULL) AS on_shelf"
    ),
    "list": "SELECT b.book_id, b.title FROM book AS b WHERE b.branch_id = ? ORDER BY 1",
    "history": (
        "SELECT l.loan_id, l.book_id FROM loan AS l WHERE l.member_id = ? ORDER BY 1"
    ),
}


@cache
def _query_size(kind: str, ident: int) -> int:
    db = _database()
    if kind == "stock":
        value: Any = db.execute(SQL[kind], (ident, ident, ident)).fetchone()
    elif kind in ("list", "history"):
        value = db.execute(SQL[kind], (ident,)).fetchall()
    else:
        value = db.execute(SQL[kind], (ident,)).fetchone()
    return len(json.dumps(value, separators=(",", ":")).encode())


class Lru:
    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[str, int] = OrderedDict()
        self.hit = self.miss = self.evicted = self.hit_bytes = self.miss_bytes = 0

    def lookup(self, key: str) -> bool:
        if key not in self.items:
            self.miss += 1
            return False
        self.items.move_to_end(key)
        self.hit += 1
        self.hit_bytes += self.items[key]
        return True

    def store(self, key: str, nbytes: int) -> None:
        self.miss_bytes += nbytes
        self.items[key] = nbytes
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)
            self.evicted += 1


def _stream(
    count: int, seed: int, bounds: list[tuple[float, str, int]]
) -> list[tuple[str, int]]:
    gen = Generator(seed)
    out = []
    for _ in range(count):
        r = gen.next()
        kind, n = next((k, n) for bound, k, n in bounds if r < bound)
        out.append((kind, gen.pick(n) + 1))
    return out


def _pct(a: int, b: int) -> float | None:
    return to_fixed_1(a / b * 100) if b else None


def cache_metrics(
    requests: int, seed: int, capacities: list[int], breakdown_capacity: int
) -> dict[str, list[list[Any]]]:
    first = _stream(
        requests, seed, [(0.75, "book", 60), (0.9, "stock", 4), (2.0, "list", 4)]
    )
    capacity_rows = []
    for size in capacities:
        lru = Lru(size)
        queries = 0
        for kind, n in first:
            tenant = "shared" if kind == "book" else f"branch-{n}"
            key = f"library:s1:g1:t{tenant}:{kind}:{n}"
            if not lru.lookup(key):
                queries += 1
                lru.store(key, _query_size("book_year" if kind == "book" else kind, n))
        capacity_rows.append(
            [
                size,
                lru.hit,
                lru.miss,
                _pct(lru.hit, lru.hit + lru.miss),
                lru.evicted,
                queries,
            ]
        )

    second = _stream(
        requests,
        seed,
        [
            (0.7, "book", 60),
            (0.8, "stock", 4),
            (0.85, "list", 4),
            (2.0, "history", 200),
        ],
    )

    def run(cached: set[str]) -> tuple[Lru, dict[str, list[int]], int]:
        lru = Lru(breakdown_capacity)
        tally = {k: [0, 0] for k in ("book", "stock", "list", "history")}
        queries = 0
        for kind, n in second:
            if kind in cached:
                tenant = "shared" if kind == "book" else f"branch-{n % 4 + 1}"
                key = f"library:s1:g1:t{tenant}:{kind}:{n}"
                if lru.lookup(key):
                    tally[kind][0] += 1
                    continue
                lru.store(key, _query_size(kind, n))
            queries += 1
            tally[kind][1] += 1
        return lru, tally, queries

    full, tally, queries = run({"book", "stock", "list", "history"})
    lean, lean_tally, lean_queries = run({"book", "stock", "list"})
    return {
        "capacity": capacity_rows,
        "namespaces": [[k, h + m, h, m, _pct(h, h + m)] for k, (h, m) in tally.items()],
        "totals": [
            [
                _pct(full.hit, full.hit + full.miss),
                _pct(full.hit_bytes, full.hit_bytes + full.miss_bytes),
                full.hit_bytes,
                full.miss_bytes,
                queries,
            ]
        ],
        "without_history": [
            [
                _pct(lean_tally["book"][0], sum(lean_tally["book"])),
                lean.evicted,
                lean_queries,
            ]
        ],
    }
