"""The live part of the cache-strategies lab: the strategies, then the race, on the
real store.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.cache_strategies.live_race import LiveRace, live_race
from course.labs.cache_strategies.live_strategies import (
    LIVE_STRATEGY_COLUMNS,
    live_strategy_row,
)
from course.labs.cache_strategies.model import RACE_BOOK, STRATEGY_NAMES, workload
from course.labs.cache_strategies.params import CacheStrategiesParams
from course.labs.harness.base import (
    Cell,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step, new_run_id
from course.labs.harness.live_store import require_books, run_keys, shelves_restored


@dataclass(frozen=True)
class Measurement:
    """Each strategy's real calls (a row each), and the race as it happened."""

    strategies: list[list[Cell]]
    race_steps: list[list[Cell]]
    race_outcome: list[list[Cell]]


def measure(params: CacheStrategiesParams, progress: Progress) -> Measurement:
    """Run the three strategies and the race on the real Redis and the real books.

    1. ``live_strategies`` (columns as ``strategies``): the same seeded workload,
       sequentially, on books 1..``hot_books``. The cache is the application's Redis
       through ``library.cache.store`` (``cache_aside`` reads, ``cache_delete`` and
       ``write_through`` writes); the origin is each book's ``on_shelf`` row, read
       with one query and written with ``library.services.stock_correct``. Every
       count is a count of real calls, so with nothing else touching those books the
       row equals the model's.
    2. ``live_race`` (key_form, step, action, cache, origin): requests A and B as
       two threads against book 7 (reset to three copies), with the lesson's plain
       key and then with ``library.cache.reads.book_detail``'s versioned key.
       ``cache`` is what the key the next reader asks for holds (``-``: nothing).
       ``live_race_outcome`` (key_form, reads, stale, key_moved): how many of the
       following reads were stale, and whether the write moved readers to a new key.

    The books' shelf counts are put back and the run's entries deleted at the end.
    """
    operations = workload(
        ops=params.ops,
        seed=params.seed,
        write_ratio=params.write_ratio,
        hot_books=params.hot_books,
    )
    books = sorted({op.book for op in operations} | {RACE_BOOK})
    require_books(books)
    run = new_run_id()
    rows: list[list[Cell]] = []
    race = LiveRace(run)
    with run_keys(run), shelves_restored(books):
        for i, name in enumerate(STRATEGY_NAMES):
            live_step(progress, 0.1 + 0.25 * i, f"strategies on Redis: {name}")
            rows.append(live_strategy_row(name, run, operations, params.flush_every))
        live_step(progress, 0.85, "race: two threads, plain key and versioned key")
        live_race(run, race)
    return Measurement(rows, race.rows, race.outcome)


def tables(params: CacheStrategiesParams, measured: Measurement) -> Tables:
    """The strategies' counts in the model's columns, and the race's steps."""
    return {
        "live_strategies": table(LIVE_STRATEGY_COLUMNS, measured.strategies),
        "live_race": table(
            ["key_form", "step", "action", "cache", "origin"], measured.race_steps
        ),
        "live_race_outcome": table(
            ["key_form", "reads", "stale", "key_moved"], measured.race_outcome
        ),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
