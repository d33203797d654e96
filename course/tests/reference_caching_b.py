"""Independent re-implementations of three caching labs, shaped differently on purpose.

Nothing here imports ``course/labs``:

- the stampede is an explicit event queue (a heap of timed callbacks) instead of
  coroutines on an event loop;
- the digest reads the raw SHA-256 bytes instead of parsing hex text;
- HTTP validators are checked with the standard library's date parser;
- cache metrics run the real SQL against an in-memory SQLite copy of the lesson's
  setup, and the LRU is an OrderedDict.

The generator and the toFixed rounding come from ``reference.py``, which is itself
independent of the labs.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import sqlite3
from collections import Counter, OrderedDict
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from functools import cache
from typing import Any

from course.tests.reference import Generator, to_fixed_1

STOCK_KEY = "library:s1:g1:tbranch-1:stock"


def sha32(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


# --- stampede as an event queue ---------------------------------------------------


class EventQueue:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (when, next(self._order), action))

    def run(self) -> None:
        while self._heap:
            self.now, _, action = heapq.heappop(self._heap)
            action()


def stampede(strategy: str, requests: int, delay: int) -> dict[str, float]:
    """All readers arrive at t=0 (queued first); each origin answer lands at t+delay."""
    q = EventQueue()
    stats = {"origin": 0, "pending": 0, "stale": 0, "last_answer": 0.0}
    state: dict[str, Any] = {"stored": False, "flight": False, "waiters": 0}

    def answered() -> None:
        stats["last_answer"] = max(stats["last_answer"], q.now)

    def origin(then: Callable[[], None]) -> None:
        stats["origin"] += 1
        q.at(q.now + delay, then)

    def arrive() -> None:
        if strategy == "plain":
            if state["stored"]:
                answered()
                return
            stats["pending"] += 1

            def landed() -> None:
                state["stored"] = True
                answered()

            origin(landed)
        elif strategy == "single-flight":
            if state["stored"]:
                answered()
                return
            stats["pending"] += 1
            state["waiters"] += 1
            if not state["flight"]:
                state["flight"] = True

                def flight_landed() -> None:
                    state["stored"] = True
                    state["flight"] = False
                    state["waiters"] = 0
                    answered()

                origin(flight_landed)
        else:  # stale-while-revalidate: an expired value is there from the start
            if not state["stored"] and not state["flight"]:
                state["flight"] = True

                def refreshed() -> None:
                    state["stored"] = True
                    state["flight"] = False

                origin(refreshed)
            if not state["stored"]:
                stats["stale"] += 1
            answered()

    for _ in range(requests):
        q.at(0.0, arrive)
    q.run()
    return stats


def hot_key(
    requests: int,
    origin_delay_ms: int,
    keys: int,
    lifetime: int,
    jitter: int,
    shard_requests: int,
    shards: int,
    copies: list[int],
) -> dict[str, list[list[Any]]]:
    out: dict[str, list[list[Any]]] = {"stampede": [], "duration": []}
    for name in ("plain", "single-flight", "stale-while-revalidate"):
        s = stampede(name, requests, origin_delay_ms)
        out["stampede"].append([name, s["origin"], s["pending"], s["stale"]])
        out["duration"].append([name, s["last_answer"]])

    names = [f"library:s1:g1:tbranch-1:book:{n}" for n in range(1, keys + 1)]
    fixed = Counter(lifetime for _ in names)
    spread = Counter(lifetime + (sha32(k) % jitter if jitter > 0 else 0) for k in names)
    out["expiry"] = [
        ["fixed lifetime", len(fixed), max(fixed.values())],
        ["jittered lifetime", len(spread), max(spread.values())],
    ]

    stream = []
    for i in range(shard_requests):
        if i % 10 >= 6:
            stream.append((False, f"library:s1:g1:tbranch-{2 + i % 3}:book:{i % 40}"))
        else:
            stream.append((True, STOCK_KEY))
    rows = []
    for n in [0, *copies]:
        load = [0] * shards
        for i, (hot, key) in enumerate(stream):
            load[sha32(f"{key}.{i % n}" if hot and n else key) % shards] += 1
        label = (
            "single key" if n == 0 else f"split into {n} cop{'y' if n == 1 else 'ies'}"
        )
        rows.append([label, to_fixed_1(max(load) / shard_requests * 100), *load])
    out["shards"] = rows
    return out


# --- HTTP validators --------------------------------------------------------------


def tag(payload: dict[str, Any]) -> tuple[str, int]:
    text = json.dumps(payload, separators=(",", ":")).encode()
    return '"' + hashlib.sha256(text).hexdigest()[:16] + '"', len(text)


def conditional(
    headers: dict[str, str], current_tag: str, modified_epoch: int | None
) -> bool:
    lowered = {k.lower(): v for k, v in headers.items()}
    if "if-none-match" in lowered:
        listed = [t.strip() for t in lowered["if-none-match"].split(",")]
        if "*" in listed:
            return True
        return any(
            t.removeprefix("W/") == current_tag.removeprefix("W/") for t in listed
        )
    if "if-modified-since" in lowered and modified_epoch is not None:
        try:
            since = parsedate_to_datetime(lowered["if-modified-since"])
        except (TypeError, ValueError):
            return False
        return modified_epoch <= int(since.timestamp())
    return False


def http_validators() -> list[list[Any]]:
    book = {"bookId": 7, "title": "Sand: Borges Selection", "author": "Anthology"}
    before = {**book, "on_shelf": 3}
    after = {**book, "on_shelf": 2}
    old_tag, size = tag(before)
    new_tag, new_size = tag(after)
    first_date = "Tue, 01 Jul 2025 09:00:00 GMT"
    first_epoch = int(parsedate_to_datetime(first_date).timestamp())

    def status(headers: dict[str, str], current: str, epoch: int) -> int:
        return 304 if conditional(headers, current, epoch) else 200

    rows = []
    for headers in ({}, {"If-None-Match": old_tag}, {"If-Modified-Since": first_date}):
        code = status(headers, old_tag, first_epoch)
        rows.append([code, size if code == 200 else 0])
    second_epoch = int(
        parsedate_to_datetime("Wed, 02 Jul 2025 14:30:00 GMT").timestamp()
    )
    code = status({"If-None-Match": old_tag}, new_tag, second_epoch)
    rows.append([code, new_size if code == 200 else 0])
    return rows


# --- cache metrics on a real SQLite copy ------------------------------------------


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
