"""Hot books: the operator's stale-while-revalidate switch for single book pages.

A book page is cache-aside: when its entry expires, the next reader misses and
produces it again while every other reader of that moment waits for it
(single-flight), or, past the wait, goes to the database too. For an ordinary book
nobody notices. For a book that everyone reads at once (a prize, a school's set
text) the expiry comes under load: each one stalls a crowd of readers at once.

An operator who sees that (the ``book`` namespace's waits on *Cache metrics*)
marks the book hot (the Books admin's action). A hot book's page is read with
``stale_while_revalidate`` instead: past its fresh time the entry is still served
to every reader at once while one background refresh produces the next. Nobody
waits at an expiry any more; the price is a page up to ``HOT_STALE_S`` older than
its fresh time, and since the key names the book's version, a loan or an edit still
shows at once (it is a new key).

The marks live in a Redis hash (book id → when marked), read by each process at
most every ``SNAPSHOT_S`` seconds, so marking costs the readers no extra round trip
per request and reaches every server within that time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Final, cast

import redis

from library.cache.metrics import cache_redis

HOT_KEY: Final = "cache:hot:book"
SNAPSHOT_S: Final = 2.0
# How long a hot book's entry is served stale, past its fresh time, while it is
# refreshed: long enough for any refresh, short against the day-long lifetime cap.
HOT_STALE_S: Final = 15 * 60

_snapshot: frozenset[int] = frozenset()
_snapshot_at = float("-inf")
_snapshot_lock = threading.Lock()


def hot_books_mark(book_ids: Iterable[int], *, now: float | None = None) -> int:
    """Mark books hot; return how many were not marked before."""
    ids = list(book_ids)
    if not ids:
        return 0
    stamp = str(int(time.time() if now is None else now))
    added = cache_redis().hset(HOT_KEY, mapping={str(i): stamp for i in ids})
    hot_marks_reload()
    return int(added)


def hot_books_unmark(book_ids: Iterable[int]) -> int:
    """Take the hot mark off books; return how many had it."""
    ids = [str(i) for i in book_ids]
    if not ids:
        return 0
    removed = cache_redis().hdel(HOT_KEY, *ids)
    hot_marks_reload()
    return int(removed)


def hot_books() -> dict[int, float]:
    """Return every hot book with when it was marked (seconds since the epoch)."""
    raw = cast(dict[bytes, bytes], cache_redis().hgetall(HOT_KEY))
    return {int(k): float(v) for k, v in raw.items()}


def book_is_hot(book_id: int, *, clock: Callable[[], float] = time.monotonic) -> bool:
    """Return whether ``book_id`` is marked hot, from this process's snapshot.

    The snapshot is read again once it is ``SNAPSHOT_S`` old. Redis unreachable:
    no book is hot (the read path then meets the same error and answers from the
    database anyway).
    """
    global _snapshot, _snapshot_at
    now = clock()
    if now - _snapshot_at >= SNAPSHOT_S:
        with _snapshot_lock:
            if now - _snapshot_at >= SNAPSHOT_S:
                try:
                    _snapshot = frozenset(hot_books())
                except redis.RedisError:
                    _snapshot = frozenset()
                _snapshot_at = now
    return book_id in _snapshot


def hot_marks_reload() -> None:
    """Make this process read the marks again at its next lookup."""
    global _snapshot_at
    with _snapshot_lock:
        _snapshot_at = float("-inf")
