"""The live race of the cache-strategies lab: the lesson's interleaving between two
real threads on the real store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from course.labs.cache_strategies.live_strategies import LIVE_LIFETIME_S
from course.labs.cache_strategies.model import COPIES_ON_SHELF, RACE_BOOK, RACE_READS
from course.labs.harness.base import Cell, LabError
from course.labs.harness.live_store import (
    LAB_NAMESPACE,
    Request,
    book_key,
    book_key_checked,
    shelf_key,
    shelf_read,
    shelf_write,
)
from library.cache import reads
from library.cache.metrics import cache_redis
from library.cache.store import cache_aside, cache_delete, decode


@dataclass
class LiveRace:
    """The race of the lesson, between two real threads on the real store."""

    run: str
    rows: list[list[Cell]] = field(default_factory=list)
    outcome: list[list[Cell]] = field(default_factory=list)

    def note(self, form: str, action: str, key: str) -> None:

        raw = cache_redis().get(key)
        shown: Cell = "-"
        if raw is not None:
            value = decode(cast(bytes, raw))
            shown = value["on_shelf"] if isinstance(value, dict) else value
        step = sum(1 for row in self.rows if row[0] == form) + 1
        self.rows.append([form, step, action, shown, shelf_read(RACE_BOOK)])

    def play(
        self,
        form: str,
        key_now: Callable[[], str],
        fill: Callable[[str, Callable[[], object]], object],
        origin_value: Callable[[], object],
        read: Callable[[], int],
        after_write: Callable[[str], None],
    ) -> None:
        """Replay the interleaving with ``form``'s key; count stale follow-up reads.

        1. Request A misses and reads the origin on its thread, then waits.
        2. Request B, on a thread of its own, writes the origin and does what the
           form does after a write (delete the entry, or nothing: the version moved).
        3. A is let go and stores the value it read before B's write.
        4. RACE_READS reads through the form's read path, each checked against the
           database.
        """

        a_has_value = threading.Event()
        b_done = threading.Event()
        key_a = key_now()

        def slow_origin() -> object:
            value = origin_value()
            a_has_value.set()
            # B's whole request runs now; a miss load is rarely this slow, and the
            # wait only makes the unlucky order certain instead of occasional.
            b_done.wait(10)
            return value

        a = Request("A", lambda: fill(key_a, slow_origin))
        a.start()
        if not a_has_value.wait(10):
            a.finish(0.1)
            raise LabError("live: request A never reached the origin")
        held = shelf_read(RACE_BOOK)
        self.note(form, "A missed and read the origin; it holds the value", key_a)

        def write() -> None:
            shelf_write(RACE_BOOK, held - 1)
            after_write(key_a)

        b = Request("B", write)
        b.start()
        try:
            b.finish()
            # Look before A is let go: once released, A may store its old value
            # before this reads the key (a CI failure under load: 3 instead of -).
            self.note(form, f"B wrote the origin and {_AFTER_WRITE[form]}", key_now())
        finally:
            b_done.set()
        a.finish()
        self.note(form, "A stored the value it read before B's write", key_now())
        stale = sum(1 for _ in range(RACE_READS) if read() != shelf_read(RACE_BOOK))
        self.note(
            form, f"{stale} of the following {RACE_READS} reads were stale", key_now()
        )
        self.outcome.append([form, RACE_READS, stale, int(key_a != key_now())])


_AFTER_WRITE = {
    "plain key": "dropped the cache entry",
    "version in the key": "left the cache alone (the version moved)",
}


def live_race(run: str, race: LiveRace) -> None:
    """Play the race with the lesson's key, then with the application's book key."""

    def reset() -> None:
        if shelf_read(RACE_BOOK) != COPIES_ON_SHELF:
            shelf_write(RACE_BOOK, COPIES_ON_SHELF)

    plain = shelf_key(run, RACE_BOOK)

    def plain_fill(key: str, produce: Callable[[], object]) -> object:
        return cache_aside(
            key=key,
            namespace=LAB_NAMESPACE,
            produce=produce,
            lifetime_s=LIVE_LIFETIME_S,
        )

    def plain_read() -> int:
        value: int = cache_aside(
            key=plain,
            namespace=LAB_NAMESPACE,
            produce=lambda: shelf_read(RACE_BOOK),
            lifetime_s=LIVE_LIFETIME_S,
        )
        return value

    def plain_delete(key: str) -> None:
        if not cache_delete(key, namespace=LAB_NAMESPACE):
            raise LabError("live: Redis refused the race's delete")

    reset()
    race.play(
        "plain key",
        lambda: plain,
        plain_fill,
        lambda: shelf_read(RACE_BOOK),
        plain_read,
        plain_delete,
    )

    reset()
    book_key_checked(RACE_BOOK)  # the lab's key is book_detail's key, or it stops

    def versioned_fill(key: str, produce: Callable[[], object]) -> object:
        # What book_detail does on a miss, with A's slow production in the middle.
        return cache_aside(
            key=key,
            namespace=reads.BOOK.namespace,
            produce=produce,
            lifetime_s=reads.BOOK_LIFETIME_S,
        )

    def versioned_read() -> int:
        found = reads.book_detail(book_id=RACE_BOOK)
        if found is None:
            raise LabError(f"live: book #{RACE_BOOK} vanished during the run")
        return found.book.on_shelf

    def versioned_origin() -> object:
        return reads.book_origin(RACE_BOOK)  # the producer book_detail itself uses

    orphan = book_key(RACE_BOOK)
    try:
        race.play(
            "version in the key",
            lambda: book_key(RACE_BOOK),
            versioned_fill,
            versioned_origin,
            versioned_read,
            lambda key: None,
        )
    finally:
        cache_delete(orphan, namespace=reads.BOOK.namespace)  # A's old value
