"""The cache's per-namespace counters as a time line, from the same minute buckets.

``metrics_read`` sums a window; the operations history needs each point of it. This
reads the buckets ``library.cache.metrics`` writes (``cachemetrics:<namespace>:
<minute>``, kept ``BUCKET_LIFETIME_S``) and groups them into points of ``step``
minutes, aligned on multiples of ``step`` as ``jobs.series`` aligns its own, so the
cache's charts and the other series share their time axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from jobs.series import window_minutes_range
from library.cache.metrics import (
    BUCKET_S,
    COUNTERS,
    KEY_PREFIX,
    NAMESPACES_KEY,
    cache_redis,
    metrics_flush,
)

__all__ = ["CacheHistory", "metrics_history"]


@dataclass(frozen=True)
class CacheHistory:
    """``counts[namespace][field][i]``: the field summed over point ``i``, which
    covers ``step`` minutes from ``start + i * step`` (minutes since the epoch)."""

    start: int
    step: int
    count: int
    counts: dict[str, dict[str, list[int]]]

    def times(self) -> list[int]:
        """Return each point's start in seconds since the epoch."""
        return [(self.start + i * self.step) * BUCKET_S for i in range(self.count)]


def metrics_history(
    fields: Sequence[str], *, minutes: int, step: int = 1, now: float | None = None
) -> CacheHistory:
    """Return ``fields`` of every namespace over the last ``minutes``, per point.

    Namespaces without any of the fields in the window are left out. This
    process's buffered counters are flushed first; Redis errors propagate.
    """
    unknown = set(fields) - set(COUNTERS)
    if unknown:
        raise ValueError(f"unknown cache counters: {sorted(unknown)}")
    metrics_flush()
    first, count = window_minutes_range(minutes, step, now)
    minute_range = range(first, first + count * step)
    client = cache_redis()
    members = cast(set[bytes], client.smembers(NAMESPACES_KEY))
    namespaces = sorted(member.decode() for member in members)
    pipe = client.pipeline(transaction=False)
    for namespace in namespaces:
        for minute in minute_range:
            # The key metrics_flush writes: f"{KEY_PREFIX}:{namespace}:{minute}".
            pipe.hmget(f"{KEY_PREFIX}:{namespace}:{minute}", list(fields))
    replies = cast(list[list[bytes | None]], pipe.execute())
    counts: dict[str, dict[str, list[int]]] = {}
    span = len(minute_range)
    for index, namespace in enumerate(namespaces):
        buckets = replies[index * span : (index + 1) * span]
        per_field: dict[str, list[int]] = {}
        for position, field in enumerate(fields):
            per_field[field] = [
                sum(
                    int(bucket[position] or 0)
                    for bucket in buckets[point * step : (point + 1) * step]
                )
                for point in range(count)
            ]
        if any(any(points) for points in per_field.values()):
            counts[namespace] = per_field
    return CacheHistory(start=first, step=step, count=count, counts=counts)
