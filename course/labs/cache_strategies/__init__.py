"""Lab for "Cache Strategies": cache-aside, write-through and write-behind compared.

Model part, ported from the lesson's two experiments:

1. ``strategies`` — one seeded workload of reads and shelf-count changes runs against
   three caches that differ only in what a write does: cache-aside writes the origin
   and drops the entry, write-through writes both, write-behind writes the cache and
   flushes the collected changes to the origin every ``flush_every`` writes. Counted:
   origin reads and writes, hits and misses, reads that returned a value other than
   the true one (``stale``), changes still waiting in the cache at the end
   (``pending``) and books whose origin row disagrees with the truth (``diverged``).
2. ``race`` — the four-step interleaving on book 7 where a cache-aside miss stores a
   value read before a concurrent write deleted the entry; fixed, as the course
   prints it.

The course keeps each origin in its own SQLite file. Here the origin is a dict of shelf
counts that counts its reads and writes: every statement the course issues is a
single-row read or overwrite by primary key, so a database would change no count.

The live part (``live.py``) runs the same workload and race on the real Redis and
the real book rows.
"""

from __future__ import annotations

from course.labs.cache_strategies import live, model
from course.labs.cache_strategies.model import (
    Operation,
    ShelfOrigin,
    workload,
)
from course.labs.cache_strategies.params import PARAMS, CacheStrategiesParams
from course.labs.harness.base import Chart, Lab

__all__ = ["LAB", "Operation", "ShelfOrigin", "workload"]


LAB = Lab(
    slug="cache-strategies",
    title="Cache Strategies",
    params=PARAMS,
    params_type=CacheStrategiesParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="strategies",
            label="strategy",
            values=("origin_reads", "origin_writes"),
            title="Traffic reaching the origin",
        ),
        Chart(
            table="strategies",
            label="strategy",
            values=("pending", "diverged"),
            title="What a crash at the end would lose",
        ),
    ),
)
