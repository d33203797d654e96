"""Lab for "Ordering and Partitioning": inversions, partition count and a hot key.

Model part, four measurements on a virtual clock where an event's duration is a
whole number of units:

1. ``competing`` — ``events`` loan events over ``books`` books, drawn from the
   course's generator seeded with ``seed``, go with no partitioning to whichever of
   ``workers`` workers frees up first (the lowest-numbered one on a tie). Events are
   then lined up by finish time and every pair that finishes in the reverse of its
   production order is an inversion: counted over all pairs (``global_inversions``)
   and over pairs of the same book (``in_key_inversions``).
2. ``partitioned`` — the same events, each sent to ``partition_of(book, n)`` and
   processed there by one worker in arrival order, for every ``n`` in
   ``partitions``. ``partition_loads`` is the busy time of partition 0, 1, ….
3. ``hot_key`` — ``hot_events`` events seeded with ``hot_seed`` where book 3 takes
   about 60 % of the traffic (six books, as printed), for every count in
   ``hot_partitions``. The busiest partition can never drop below book 3's load.
4. ``head_of_line`` — at two partitions, the events of other books that share book
   3's partition: their average wait before starting, and the average wait the same
   events would see in order in a partition of their own (no hot key ahead of them).
   With no such event both averages are ``null`` (the course prints ``-``/``NaN``).

The partition function is ``partition_of(key, partitions) = key % partitions``: the
book id modulo the partition count, a pure function of two non-negative integers with
no hashing and no state, so a live part and the application's partitioned
subscription can route with the very same rule and land every book on the partition
the model predicts.

Finish order breaks ties on the partition (or worker) number, then production order;
within one partition finish times strictly increase, so the order is total. Inversions
are counted with a merge sort (O(n log n)), not by comparing every pair, so large
``events`` values stay fast; the result is the same count. The course's header lines
(distinct books, the hot workload's totals) go to the extra tables ``workload`` and
``hot_workload``.

Live part, on real ``manage.py rqworker messaging`` processes
(``course.labs.harness.live``),
for each count in ``workers`` (at most 4, up to 400 events, 60 books):

- ``live_competing`` — no subscription of the application takes library messages
  unpartitioned for a lab alone, so competing consumption is measured with rq jobs
  of the run's own: one job per event on a private queue, enqueued in production
  order, W worker processes. A job sleeps its event's duration times 80 ms plus a
  random 0-80 ms (seeded with ``seed``), then RPUSHes its order to a Redis list:
  the list is the apply order. Columns: workers, workers_used (distinct rq workers
  that ran jobs), events, duration_s (first enqueue to the last job's end),
  global_inversions, in_key_inversions, model_in_key_inversions (the model's count
  for the same W, for comparison).
- ``live_partitioned`` — with the largest W, every event becomes a real
  ``library.services.stock_correct`` of a book the run created (one commit, one
  outbox message), which the relay copies to the partitioned ``book_ledger``
  subscription. The ledger's rows, by id, are the apply order. The books are picked
  so that ``book id mod 4`` equals ``model book mod 4``: the real router sends
  each event to the partition the model sends it to. Columns: partitions, workers,
  drain_jobs (distinct lease owners, one per drain job), events, duration_s (first
  commit to the last ledger delivery's ``done_at``), global_inversions,
  in_key_inversions, ledger_out_of_order (rows the handler itself flagged
  ``in_order=False``), partition_events (ledger deliveries per partition, from
  their ``partition`` column), model_partition_events, peak_pending (the most
  pending deliveries ``partition_loads`` showed per partition while polling),
  partition_finish_ms (first commit to each partition's last ``done_at``).
- ``live_hot_key`` — the hot-key events (book 3 hot) the same way, on the ledger's
  4 partitions. Columns: partitions, workers, events, hot_book (the model book with
  the most ledger rows), hot_book_id (its live id), hot_share_pct, hot_partition,
  busiest_partition, partition_events, model_partition_events, peak_pending,
  partition_finish_ms, in_key_inversions, ledger_out_of_order.

The ledger's handler has no deliberate delay (``library`` offers no hook for one),
so partition_finish_ms reflects real, short processing; the in-key count is zero by
construction (one lease per partition, offset order), whatever the delays. The run's
books, branch, ledger rows and (once the stream consumers passed them) projection
rows are deleted at the end; its outbox messages stay in the log like any other.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.ordering_and_partitioning import live, model
from course.labs.ordering_and_partitioning.live import (
    APPLIED_TTL_S,
    LEDGER,
    applied_key,
    competing_apply,
    live_inversions,
)
from course.labs.ordering_and_partitioning.live_tables import expected_partition_events
from course.labs.ordering_and_partitioning.model import (
    HOT_BOOK,
    Event,
    count_inversions,
    hot_key_events,
    loan_events,
    mean_fixed,
    partition_of,
    run_competing,
    run_partitioned,
)
from course.labs.ordering_and_partitioning.params import (
    PARAMS,
    OrderingParams,
)

__all__ = [
    "APPLIED_TTL_S",
    "HOT_BOOK",
    "LAB",
    "LEDGER",
    "Event",
    "applied_key",
    "competing_apply",
    "count_inversions",
    "expected_partition_events",
    "hot_key_events",
    "live_inversions",
    "loan_events",
    "mean_fixed",
    "partition_of",
    "run_competing",
    "run_partitioned",
]


LAB = Lab(
    slug="ordering-and-partitioning",
    title="Ordering and Partitioning",
    params=PARAMS,
    params_type=OrderingParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="competing",
            label="workers",
            values=("global_inversions", "in_key_inversions"),
            title="Inversions with competing workers",
            unit="pairs",
        ),
        Chart(
            table="partitioned",
            label="partitions",
            values=("global_inversions", "in_key_inversions"),
            title="Inversions when partitioned by book",
            unit="pairs",
        ),
        Chart(
            table="partitioned",
            label="partitions",
            values=("duration",),
            title="Duration by partition count",
            unit="units",
        ),
        Chart(
            table="hot_key",
            label="partitions",
            values=("duration",),
            title="Duration with a hot key",
            unit="units",
        ),
    ),
)
