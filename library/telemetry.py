"""What the library reports to Prometheus: the cache's counters per namespace.

The cache keeps its counters only in minute buckets that expire (``library.cache.
metrics``), so a total since some start does not exist: a sum over the buckets would
fall as old ones expire, which Prometheus would read as a counter reset. They are
exposed as gauges over a sliding window named in the metric (``_last_5m``: the
current minute and the four before it). Redis's own eviction and expiry counts are
real counters (since the server started) and are exposed as such.

The operations history reads the same buckets itself (``library.cache.
metrics_history``), so the cache declares no series and no sampler.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from jobs.exposition import PREFIX, exposition_register
from library.cache.metrics import REDIS_TOTALS, metrics_read

__all__ = ["WINDOW_MINUTES", "telemetry_register"]

WINDOW_MINUTES: Final = 5
_SUFFIX: Final = f"_last_{WINDOW_MINUTES}m"
_FIELDS: Final = (
    ("hits", "Cache lookups answered from a cache tier"),
    ("misses", "Cache lookups that found nothing"),
    ("origin_calls", "Calls of the origin (productions) behind the cache"),
    ("hit_bytes", "Bytes of the values served on hits"),
    ("miss_bytes", "Bytes of the values produced for misses"),
)


def _families() -> Iterator[Metric]:
    report = metrics_read(WINDOW_MINUTES)
    server = report.pop(REDIS_TOTALS)
    for field, text in _FIELDS:
        family = GaugeMetricFamily(
            f"{PREFIX}cache_{field}{_SUFFIX}",
            f"{text}, over the last {WINDOW_MINUTES} minutes",
            labels=["namespace"],
        )
        for namespace, metrics in sorted(report.items()):
            family.add_metric([namespace], metrics[field])  # type: ignore[literal-required]
        yield family
    ratio = GaugeMetricFamily(
        f"{PREFIX}cache_hit_ratio{_SUFFIX}",
        f"hits / (hits + misses) over the last {WINDOW_MINUTES} minutes",
        labels=["namespace"],
    )
    for namespace, metrics in sorted(report.items()):
        if metrics["hit_ratio"] is not None:
            ratio.add_metric([namespace], metrics["hit_ratio"])
    yield ratio
    yield CounterMetricFamily(
        f"{PREFIX}redis_evicted_keys",
        "Keys Redis evicted under maxmemory since it started (server-wide)",
        value=server["evictions"],
    )
    yield CounterMetricFamily(
        f"{PREFIX}redis_expired_keys",
        "Keys Redis expired since it started (server-wide)",
        value=server["expiries"],
    )


def telemetry_register() -> None:
    """Register the cache's Prometheus families."""
    exposition_register("cache", _families)
