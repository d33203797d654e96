"""The partitions benchmark: ordered vs unordered subscriptions, and a full replay.

Two measurements:

1. Throughput with W workers (W = 1, 2, 4 by default): N loans are issued while no
   worker runs (N outbox messages, one delivery per accepting subscription), W
   ``manage.py rqworker messaging`` processes boot, one ``nudge_drain()`` starts the
   clock. Every subscription's deliveries of the same N messages are drained by the
   same drain jobs: the unpartitioned ones in claimed batches, ``book_ledger`` a
   partition at a time (4 partitions, one lease each, offset order). Each
   subscription's completion time is its last ``Delivery.done_at`` minus the nudge.
2. Full replay of the ``stock_projection`` stream consumer, in the benchmark's own
   process: N loans are published, ``stream_rewind(offset=0, rebuild=True)`` empties
   the projection, and ``stream_advance`` is called until the consumer's offset
   reaches the newest message. Events per second = messages replayed / wall time;
   the rebuilt projection is checked against the books.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.common import (
    BenchError,
    Children,
    flush_bench_redis,
    format_table,
    markdown_page,
    median,
    utcnow,
    wait_for_workers,
    wait_until,
)
from bench.outbox import create_library, effects_per_loan, issue_loans, reset_activity
from config.processes import manage_command

NAME = "partitions"
ORDERED = "book_ledger"
STREAM = "stock_projection"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("partitions")
    group.add_argument(
        "--partition-loans", type=int, help="N messages per run (default 1000)"
    )
    group.add_argument(
        "--partition-workers",
        type=lambda text: [int(n) for n in text.split(",")],
        help="worker counts, comma-separated (default 1,2,4)",
    )
    group.add_argument(
        "--partition-repeats", type=int, help="R runs per worker count (default 2)"
    )
    group.add_argument(
        "--replay-loans", type=int, help="messages in the log to replay (default 5000)"
    )


@dataclass(frozen=True)
class Params:
    loans: int
    workers: list[int]
    repeats: int
    replay_loans: int

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> Params:
        quick = options.quick
        params = cls(
            loans=options.partition_loans or (150 if quick else 1000),
            workers=options.partition_workers or [1, 2, 4],
            repeats=options.partition_repeats or (1 if quick else 2),
            replay_loans=options.replay_loans or (300 if quick else 5000),
        )
        if min(params.loans, params.repeats, params.replay_loans, *params.workers) < 1:
            raise BenchError("partition loans, workers, repeats must be at least 1")
        return params


def _reset() -> None:
    """Empty what the outbox benchmark's reset leaves: ledger, projection, leases."""
    from library.models import BookLedger, StockProjection
    from messaging.models import PartitionLease, StreamConsumer

    reset_activity()
    for model in (BookLedger, StockProjection, PartitionLease, StreamConsumer):
        model.objects.all().delete()


# --- Throughput ---------------------------------------------------------------


def throughput_run(
    *, children: Children, loans: int, workers: int, repeat: int, ids: Any
) -> dict[str, Any]:
    """Publish N loans with no worker; time W workers draining every subscription."""
    from django.db.models import Count, Max

    from messaging.dispatch import nudge_drain
    from messaging.models import Delivery

    _reset()
    flush_bench_redis()
    issue_loans(loans, *ids)
    # The commits' nudges went to a queue nobody served: start from one nudge.
    flush_bench_redis()
    names = [f"partitions-{workers}-{repeat}-{w}" for w in range(workers)]
    for name in names:
        children.start(
            name, manage_command("rqworker", "messaging", "--verbosity", "0")
        )
    wait_for_workers("messaging", workers, children)
    # The relay writes the deliveries inside the drains: count them from the registry.
    expected = loans * effects_per_loan()
    started = utcnow()
    nudge_drain()
    wait_until(
        lambda: (
            Delivery.objects.filter(status=Delivery.Status.DONE).count() >= expected
        ),
        timeout=max(180.0, loans * 0.5),
        what=f"{expected} deliveries done",
        children=children,
        interval=0.1,
    )
    for name in names:
        children.stop(name)
    not_done = Delivery.objects.exclude(status=Delivery.Status.DONE).count()
    if not_done:
        raise BenchError(f"{not_done} deliveries ended up not done (dead letters?)")
    per_subscription = {
        row["subscription"]: {
            "deliveries": row["n"],
            "completion_s": round((row["last"] - started).total_seconds(), 3),
            "drain_jobs": row["owners"],
        }
        for row in Delivery.objects.values("subscription").annotate(
            n=Count("id"),
            last=Max("done_at"),
            owners=Count("lease_owner", distinct=True),
        )
    }
    for values in per_subscription.values():
        values["deliveries_per_s"] = round(
            values["deliveries"] / values["completion_s"], 1
        )
    return {
        "workers": workers,
        "repeat": repeat,
        "messages": loans,
        "deliveries": expected,
        "subscriptions": per_subscription,
    }


def summarize(runs: list[dict[str, Any]], workers: list[int]) -> list[dict[str, Any]]:
    """Return per worker count: each subscription's median completion and rate."""
    rows = []
    for count in workers:
        mine = [r for r in runs if r["workers"] == count]
        names = sorted(mine[0]["subscriptions"])
        medians = {
            name: {
                "completion_s": round(
                    median([r["subscriptions"][name]["completion_s"] for r in mine]), 3
                ),
                "deliveries_per_s": round(
                    median(
                        [r["subscriptions"][name]["deliveries_per_s"] for r in mine]
                    ),
                    1,
                ),
            }
            for name in names
        }
        unordered = [n for n in names if n != ORDERED]
        slowest_unordered = max(medians[n]["completion_s"] for n in unordered)
        rows.append(
            {
                "workers": count,
                "subscriptions": medians,
                "ordered_vs_slowest_unordered": round(
                    medians[ORDERED]["completion_s"] / slowest_unordered, 2
                ),
                "all_done_s": max(m["completion_s"] for m in medians.values()),
            }
        )
    return rows


# --- Replay -------------------------------------------------------------------


def replay(*, loans: int, ids: Any) -> dict[str, Any]:
    """Publish N loans, rewind the projection to 0 with a rebuild, time the replay."""
    from django.db import connection
    from django.db.models import Max

    from library.models import Book, StockProjection
    from messaging.models import OutboxMessage, StreamConsumer
    from messaging.registry import STREAM_CONSUMERS
    from messaging.services.streams import STREAM_GRACE, stream_advance, stream_rewind

    _reset()
    flush_bench_redis()
    issue_loans(loans, *ids)
    newest = OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0
    messages = OutboxMessage.objects.count()
    if connection.vendor != "sqlite":
        # The consumer reads only messages older than the grace (see streams.py).
        time.sleep(STREAM_GRACE.total_seconds() + 0.2)
    stream_rewind(STREAM, offset=0, rebuild=True)
    calls = 0
    started = time.perf_counter()
    while True:
        calls += 1
        moved = stream_advance(STREAM)
        offset = StreamConsumer.objects.values_list("offset", flat=True).get(
            name=STREAM
        )
        if offset >= newest:
            break
        if not moved:
            raise BenchError(f"replay stopped at offset {offset} of {newest}")
    elapsed = time.perf_counter() - started
    books = dict(Book.objects.values_list("pk", "on_shelf"))
    projected = dict(StockProjection.objects.values_list("book_id", "on_shelf"))
    mismatched = sum(1 for pk, n in projected.items() if books.get(pk) != n)
    return {
        "messages": messages,
        "batch": STREAM_CONSUMERS[STREAM].batch,
        "advance_calls": calls,
        "wall_s": round(elapsed, 3),
        "events_per_s": round(messages / elapsed, 1),
        "projection_rows": len(projected),
        "rows_not_matching_books": mismatched,
    }


# --- The benchmark ------------------------------------------------------------


def run(children: Children, options: argparse.Namespace) -> dict[str, Any]:
    """Run both measurements; print the tables; return the results document."""
    params = Params.from_options(options)
    ids = create_library()
    runs: list[dict[str, Any]] = []
    for repeat in range(1, params.repeats + 1):
        # Worker counts interleaved per repeat, so each count sees the same noise.
        for workers in params.workers:
            print(
                f"  throughput run {repeat}/{params.repeats}: W={workers} ...",
                flush=True,
            )
            result = throughput_run(
                children=children,
                loans=params.loans,
                workers=workers,
                repeat=repeat,
                ids=ids,
            )
            subs = result["subscriptions"]
            print(
                "    "
                + ", ".join(f"{n} {v['completion_s']:.2f} s" for n, v in subs.items()),
                flush=True,
            )
            runs.append(result)
    replays = []
    for repeat in range(1, params.repeats + 1):
        print(f"  replay {repeat}/{params.repeats} ...", flush=True)
        replays.append(replay(loans=params.replay_loans, ids=ids))
        print(f"    {replays[-1]['events_per_s']:,.0f} events/s", flush=True)
    result = {
        "params": asdict(params),
        "throughput": summarize(runs, params.workers),
        "throughput_runs": runs,
        "replay": {
            "median_events_per_s": median([r["events_per_s"] for r in replays]),
            "median_wall_s": median([r["wall_s"] for r in replays]),
            "runs": replays,
        },
    }
    print()
    print(text_report(result))
    return result


def text_report(result: dict[str, Any]) -> str:
    p = result["params"]
    rows = result["throughput"]
    names = sorted(rows[0]["subscriptions"], key=lambda n: (n == ORDERED, n))
    table_rows = [
        [
            f"W={row['workers']}",
            *(row["subscriptions"][n]["completion_s"] for n in names),
            row["ordered_vs_slowest_unordered"],
        ]
        for row in rows
    ]
    rate_rows = [
        [
            f"W={row['workers']}",
            *(row["subscriptions"][n]["deliveries_per_s"] for n in names),
        ]
        for row in rows
    ]
    scaling = []
    first = rows[0]

    def speedup(name: str, row: dict[str, Any]) -> float:
        before = first["subscriptions"][name]["completion_s"]
        return float(before / row["subscriptions"][name]["completion_s"])

    for row in rows[1:]:
        scaling.append(
            f"W={first['workers']} -> W={row['workers']}: "
            + ", ".join(f"{n} {speedup(n, row):.2f}x" for n in names)
        )
    replay_ = result["replay"]
    last = replay_["runs"][-1]
    return "\n".join(
        [
            f"Completion time per subscription (s from the nudge to its last done_at):"
            f" N={p['loans']} loans, median of {p['repeats']} run(s) per W",
            format_table(["workers", *names, f"{ORDERED}/slowest other"], table_rows),
            "",
            "Deliveries per second per subscription",
            format_table(["workers", *names], rate_rows),
            "",
            "Speed-up from more workers (completion time ratio):",
            *scaling,
            "",
            f"Full replay of {STREAM} (in-process stream_advance, batch"
            f" {last['batch']}): {last['messages']} messages",
            format_table(
                ["replay", "wall s", "events/s", "calls", "rows", "not matching"],
                [
                    [
                        f"run {i}",
                        r["wall_s"],
                        r["events_per_s"],
                        r["advance_calls"],
                        r["projection_rows"],
                        r["rows_not_matching_books"],
                    ]
                    for i, r in enumerate(replay_["runs"], 1)
                ],
            ),
            f"median: {replay_['median_events_per_s']:,.0f} events/s",
        ]
    )


def markdown_report(document: dict[str, Any]) -> str:
    return markdown_page(
        document,
        title="Partitions benchmark (ordered subscription, stream replay)",
        report=text_report(document["results"][NAME]),
        note="All subscriptions drain the same messages in the same drain jobs, so a"
        " completion time includes the others' work; compare them within a row"
        " and across worker counts (see bench/README.md).",
    )
