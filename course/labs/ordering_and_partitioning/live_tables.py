"""The live part's tables, built from what a live run measured."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from course.labs.harness.base import (
    Cell,
    Tables,
    table,
)
from course.labs.harness.jsnum import js_fixed_number
from course.labs.ordering_and_partitioning.model import (
    Event,
    loads_text,
    partition_of,
)

log = logging.getLogger("course.live")


def expected_partition_events(events: Sequence[Event], partitions: int) -> list[int]:
    """Return how many events the model routes to each partition."""
    counts = [0] * partitions
    for event in events:
        counts[partition_of(event.book_id, partitions)] += 1
    return counts


@dataclass(frozen=True)
class Ordered:
    """What one partitioned run measured on the real ``book_ledger`` subscription."""

    events: int
    drain_jobs: int
    duration_s: float
    global_inversions: int
    in_key_inversions: int
    out_of_order: int
    partition_events: list[int]
    peak_pending: list[int]
    partition_finish_ms: list[int]
    ledger_counts: dict[int, int]  # model book -> ledger rows


def build_live_tables(
    competing_rows: list[list[Cell]],
    main: Ordered,
    hot_run: Ordered,
    events: Sequence[Event],
    hot: Sequence[Event],
    book_ids: dict[int, int],
    workers: int,
    partitions: int,
) -> Tables:
    hottest = max(sorted(hot_run.ledger_counts), key=hot_run.ledger_counts.__getitem__)
    busiest = max(range(partitions), key=hot_run.partition_events.__getitem__)
    share = hot_run.ledger_counts[hottest] / hot_run.events if hot_run.events else 0
    return {
        "live_competing": table(
            [
                "workers",
                "workers_used",
                "events",
                "duration_s",
                "global_inversions",
                "in_key_inversions",
                "model_in_key_inversions",
            ],
            competing_rows,
        ),
        "live_partitioned": table(
            [
                "partitions",
                "workers",
                "drain_jobs",
                "events",
                "duration_s",
                "global_inversions",
                "in_key_inversions",
                "ledger_out_of_order",
                "partition_events",
                "model_partition_events",
                "peak_pending",
                "partition_finish_ms",
            ],
            [
                [
                    partitions,
                    workers,
                    main.drain_jobs,
                    main.events,
                    main.duration_s,
                    main.global_inversions,
                    main.in_key_inversions,
                    main.out_of_order,
                    loads_text(main.partition_events),
                    loads_text(expected_partition_events(events, partitions)),
                    loads_text(main.peak_pending),
                    loads_text(main.partition_finish_ms),
                ]
            ],
        ),
        "live_hot_key": table(
            [
                "partitions",
                "workers",
                "events",
                "hot_book",
                "hot_book_id",
                "hot_share_pct",
                "hot_partition",
                "busiest_partition",
                "partition_events",
                "model_partition_events",
                "peak_pending",
                "partition_finish_ms",
                "in_key_inversions",
                "ledger_out_of_order",
            ],
            [
                [
                    partitions,
                    workers,
                    hot_run.events,
                    hottest,
                    book_ids[hottest],
                    js_fixed_number(100 * share, 1),
                    partition_of(book_ids[hottest], partitions),
                    busiest,
                    loads_text(hot_run.partition_events),
                    loads_text(expected_partition_events(hot, partitions)),
                    loads_text(hot_run.peak_pending),
                    loads_text(hot_run.partition_finish_ms),
                    hot_run.in_key_inversions,
                    hot_run.out_of_order,
                ]
            ],
        ),
    }
