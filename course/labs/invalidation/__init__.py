"""Lab for "Invalidation": time-, event- and version-based eviction on one workload.

Model part, ported from the lesson's two experiments:

1. ``invalidation`` — the ``cache-strategies`` workload (15 % writes over 12 books,
   ``ops`` operations from ``seed``) on a clock that advances one tick per operation.
   Writes change the origin only; how the cache learns about them is the policy:

   - ``time (lifetime=N)`` — an entry stored at tick t answers reads while the clock
     is below t + N; writes leave the cache alone;
   - ``event (delay=N)`` — every write leaves a message in an outbox in the same
     step; a consumer that wakes every N ticks drops the entries the messages name;
   - ``version`` — a write raises the book's version, which is part of the key, so
     the old entry is simply never asked for again.

   A read is ``stale`` when the value it returns differs from the origin's row.
2. ``orphans`` — after one book version and one branch generation are raised, how
   many of the cache's entries no key can reach any more. Fixed, as printed.

The course keeps the origin and its outbox in SQLite so that the row and the message
commit together. In this single-threaded model nothing can observe the gap between
the two, so the origin is a dict and the outbox a list; only counts are reported.
The keys of ``orphans`` keep the lesson's hand-built shapes on purpose: building them
properly is the next lesson, whose lab uses ``library.cache.keys``.

The live part (``live.py``) changes one real book and times three real read paths,
one of them retired by the outbox through a real rq worker.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.invalidation import live, model
from course.labs.invalidation.live import LIVE_READS_AFTER_FRESH
from course.labs.invalidation.params import PARAMS, InvalidationParams

__all__ = ["LAB", "LIVE_READS_AFTER_FRESH"]


LAB = Lab(
    slug="invalidation",
    title="Invalidation",
    params=PARAMS,
    params_type=InvalidationParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="invalidation",
            label="invalidation",
            values=("origin_reads", "stale"),
            title="Origin reads against stale reads",
        ),
    ),
)
