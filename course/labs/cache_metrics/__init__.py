"""Lab for "Cache Metrics": hit ratio against capacity, per namespace and per byte.

Model part, two workloads from the course's generator (``requests`` and ``seed`` drive
both):

1. ``capacity`` — book / stock / list reads (75 / 15 / 10 %) through a least-recently-
   used cache of each size in ``capacities``: hits, misses, evictions, origin queries.
2. the breakdown — book / stock / list / loan-history reads (70 / 10 / 5 / 15 %) through
   one cache of ``breakdown_capacity`` entries, counted per namespace and per byte
   (``namespaces``, ``totals``), then again with loan histories kept out of the cache
   (``without_history``).

The origin is the lesson's measurement database: 300 books and 4000 loans generated
from fixed rules. Its rows are derived here from the same rules instead of being
queried from SQLite. The values matter only through their JSON size, and a derived
row serialises to the same text as the row the lesson's query returns, in the same
column order.

The live part (``live.py``) runs both workloads through the application's bounded
in-process tier and reads the counts back from its metrics.
"""

from __future__ import annotations

from course.labs.cache_metrics import live, model
from course.labs.cache_metrics.params import PARAMS, CacheMetricsParams
from course.labs.harness.base import Chart, Lab

__all__ = ["LAB"]


LAB = Lab(
    slug="cache-metrics",
    title="Cache Metrics",
    params=PARAMS,
    params_type=CacheMetricsParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="capacity",
            label="capacity",
            values=("hit_ratio_pct",),
            title="Hit ratio as capacity grows",
            unit="%",
        ),
        Chart(
            table="namespaces",
            label="namespace",
            values=("hit_ratio_pct",),
            title="Hit ratio per namespace",
            unit="%",
        ),
    ),
)
