"""Per-namespace cache counters, and the record of Redis errors on cache paths.

Recording is cheap: ``metrics_record`` adds to an in-process buffer under a lock and
touches Redis only when ``FLUSH_EVENTS`` events have piled up or ``FLUSH_INTERVAL_S``
has passed since the last flush (or on ``metrics_flush()`` / process exit). A flush is
ONE pipeline: an ``HINCRBY`` per non-zero field on ``cachemetrics:<namespace>:<minute>``
plus its expiry, so the per-request cost is a dictionary update, never a round trip.

Minute buckets make any window cheap to read: ``metrics_read(window_minutes)`` sums
the buckets of the last ``window_minutes`` minutes for every namespace in one pipeline
and derives the request hit ratio and the byte hit ratio.

What Redis cannot tell per namespace: its own evictions (``maxmemory`` pressure) and
expiries happen inside the server and ``INFO stats`` reports them only as server-wide
totals (``evicted_keys``, ``expired_keys``; keyspace notifications could attribute
them, but they are fire-and-forget and cost a subscriber per instance). Those totals
are returned under the reserved entry ``REDIS_TOTALS`` (``"redis:global"`` — a real
namespace can never contain ``:``). The per-namespace ``evictions`` and ``expiries``
fields count what the cache code does observe exactly: entries the in-process local
tier dropped to stay within its size bound, and local entries found past their life.

Redis errors never propagate from here; they are counted and logged at most once a
minute (``redis_failed``), and for ``DEGRADED_S`` afterwards the read paths skip Redis
and go straight to the origin instead of waiting on a server that is down. The client
itself lives in ``library.cache.connection``; ``cache_redis`` and ``redis_usable``
are re-exported here for the callers that import them with the counters.
"""

from __future__ import annotations

import atexit
import logging
import re
import threading
import time
from collections import defaultdict
from typing import Final, TypedDict, cast

import redis

from library.cache.connection import cache_redis, degrade_for, redis_usable

__all__ = [
    "COUNTERS",
    "FLUSH_EVENTS",
    "FLUSH_INTERVAL_S",
    "REDIS_TOTALS",
    "NamespaceMetrics",
    "cache_redis",
    "metrics_buffer",
    "metrics_flush",
    "metrics_read",
    "metrics_record",
    "metrics_reset",
    "redis_errors_total",
    "redis_failed",
    "redis_usable",
]

logger = logging.getLogger(__name__)

COUNTERS: Final = (
    "hits",  # answered from a cache tier (local, Redis, or a stale entry)
    "local_hits",  # the part of ``hits`` the in-process tier answered
    "misses",  # the first lookup found nothing (or Redis was unusable)
    "hit_bytes",  # bytes of the values served on hits
    "miss_bytes",  # bytes of the values that had to be produced for a miss
    "sets",  # values written to Redis
    "evictions",  # local-tier entries dropped by the size bound
    "expiries",  # local-tier entries found expired
    "singleflight_saved",  # origin calls avoided by sharing another's production
    "singleflight_fallbacks",  # waits that timed out and produced anyway
    "stale_served",  # stale-while-revalidate answers past their fresh time
    "origin_calls",  # productions (calls of ``produce``)
    "origin_ms_total",  # wall time spent in ``produce``
    "cache_ms_total",  # wall time spent on cache lookups
    "errors",  # Redis errors met (the request fell back to the origin)
)
_FIELDS: Final = frozenset(COUNTERS)

REDIS_TOTALS: Final = "redis:global"
FLUSH_EVENTS: Final = 200
FLUSH_INTERVAL_S: Final = 1.0
BUCKET_S: Final = 60
# Buckets outlive any window an operator looks at, then disappear on their own.
BUCKET_LIFETIME_S: Final = 3 * 24 * 60 * 60
KEY_PREFIX: Final = "cachemetrics"
NAMESPACES_KEY: Final = f"{KEY_PREFIX}:namespaces"

# After a Redis error the read paths go to the origin directly for this long, so a
# dead or hung server costs one timeout per DEGRADED_S, not one per request.
DEGRADED_S: Final = 1.0
WARNING_INTERVAL_S: Final = 60.0


class NamespaceMetrics(TypedDict):
    """Counters of one namespace over a window, with the derived ratios."""

    hits: int
    local_hits: int
    misses: int
    hit_bytes: int
    miss_bytes: int
    sets: int
    evictions: int
    expiries: int
    singleflight_saved: int
    singleflight_fallbacks: int
    stale_served: int
    origin_calls: int
    origin_ms_total: int
    cache_ms_total: int
    errors: int
    hit_ratio: float | None  # hits / (hits + misses); None before any request
    byte_hit_ratio: float | None  # hit_bytes / (hit_bytes + miss_bytes)


# --- Redis errors -------------------------------------------------------------------

_errors_total = 0
_last_warning_at = float("-inf")


def redis_failed(error: Exception, *, namespace: str, during: str) -> None:
    """Record a Redis error met on a cache path: count it, warn at most once a minute.

    The caller has already decided to carry on without the cache; this only keeps the
    failure visible and makes the next ``DEGRADED_S`` of requests skip Redis.
    """
    global _errors_total, _last_warning_at
    now = time.monotonic()
    degrade_for(DEGRADED_S)
    with _buffer_lock:
        _errors_total += 1
        warn = now - _last_warning_at >= WARNING_INTERVAL_S
        if warn:
            _last_warning_at = now
    if warn:
        logger.warning(
            "cache: Redis error during %s (namespace %s), serving from the origin: %s",
            during,
            namespace,
            error,
        )
    _add(namespace, {"errors": 1}, time.time())


def redis_errors_total() -> int:
    """Return how many Redis errors this process has met on cache paths."""
    return _errors_total


# --- recording ----------------------------------------------------------------------

_Bucket = tuple[str, int]  # (namespace, minute since the epoch)
_buffer: defaultdict[_Bucket, defaultdict[str, int]] = defaultdict(
    lambda: defaultdict(int)
)
_buffer_lock = threading.Lock()
_buffered_events = 0
_last_flush_at = time.monotonic()


def _minute(now: float) -> int:
    return int(now // BUCKET_S)


def _check_namespace(namespace: str) -> None:
    # ":" separates the parts of a bucket key; allowing it would let one namespace
    # read as another (and reach the reserved REDIS_TOTALS entry).
    if not namespace or ":" in namespace:
        raise ValueError(
            f"a metrics namespace must be non-empty, without ':': {namespace!r}"
        )


def _add(namespace: str, counts: dict[str, int], now: float) -> bool:
    """Add counts to the buffer; return True when a flush is due."""
    global _buffered_events
    with _buffer_lock:
        bucket = _buffer[(namespace, _minute(now))]
        for field, amount in counts.items():
            bucket[field] += amount
        _buffered_events += 1
        return (
            _buffered_events >= FLUSH_EVENTS
            or time.monotonic() - _last_flush_at >= FLUSH_INTERVAL_S
        )


def metrics_record(namespace: str, *, now: float | None = None, **counts: int) -> None:
    """Add ``counts`` (field=amount) to ``namespace``'s counters for the current minute.

    ``now`` (seconds since the epoch) places the event in a minute bucket; tests and
    labs inject it, callers leave it out. Unknown field names raise ``ValueError``.
    """
    _check_namespace(namespace)
    unknown = counts.keys() - _FIELDS
    if unknown:
        raise ValueError(f"unknown cache counters: {sorted(unknown)}")
    if _add(namespace, counts, time.time() if now is None else now):
        metrics_flush()


def metrics_buffer(namespace: str, **counts: int) -> bool:
    """Buffer ``counts`` without any I/O; return True when a flush is due.

    For event-loop callers, which must not block on Redis: they run
    ``metrics_flush`` in a thread when this says so.
    """
    _check_namespace(namespace)
    unknown = counts.keys() - _FIELDS
    if unknown:
        raise ValueError(f"unknown cache counters: {sorted(unknown)}")
    return _add(namespace, counts, time.time())


def _bucket_key(namespace: str, minute: int) -> str:
    return f"{KEY_PREFIX}:{namespace}:{minute}"


def metrics_flush() -> None:
    """Send the buffered counters to Redis in one pipeline and empty the buffer.

    A batch that Redis refuses is dropped (and the error counted): counters are an
    estimate, and holding them back without bound would be a leak while Redis is down.
    """
    global _buffer, _buffered_events, _last_flush_at
    with _buffer_lock:
        batch = _buffer
        _buffer = defaultdict(lambda: defaultdict(int))
        _buffered_events = 0
        _last_flush_at = time.monotonic()
    pending = {key: fields for key, fields in batch.items() if any(fields.values())}
    if not pending:
        return
    if not redis_usable():
        return  # Redis just failed; a flush now would only wait on it again
    try:
        pipe = cache_redis().pipeline(transaction=False)
        namespaces = set()
        for (namespace, minute), fields in pending.items():
            key = _bucket_key(namespace, minute)
            for field, amount in fields.items():
                if amount:
                    pipe.hincrby(key, field, amount)
            pipe.expire(key, BUCKET_LIFETIME_S)
            namespaces.add(namespace)
        pipe.sadd(NAMESPACES_KEY, *sorted(namespaces))
        pipe.expire(NAMESPACES_KEY, BUCKET_LIFETIME_S)
        pipe.execute()
    except redis.RedisError as error:
        # Not redis_failed(): that would buffer an "errors" count and flush again.
        logger.debug(
            "cache metrics: dropped a batch of %d buckets: %s", len(pending), error
        )


def _flush_at_exit() -> None:
    try:
        metrics_flush()
    except Exception:  # exiting: there is nothing useful left to do with it
        logger.debug("cache metrics: final flush failed", exc_info=True)


atexit.register(_flush_at_exit)


# --- reading ------------------------------------------------------------------------


def metrics_from_counts(counts: dict[str, int]) -> NamespaceMetrics:
    """Return the counters with their request and byte hit ratios (None when 0/0)."""
    requests = counts["hits"] + counts["misses"]
    volume = counts["hit_bytes"] + counts["miss_bytes"]
    return NamespaceMetrics(
        hits=counts["hits"],
        local_hits=counts["local_hits"],
        misses=counts["misses"],
        hit_bytes=counts["hit_bytes"],
        miss_bytes=counts["miss_bytes"],
        sets=counts["sets"],
        evictions=counts["evictions"],
        expiries=counts["expiries"],
        singleflight_saved=counts["singleflight_saved"],
        singleflight_fallbacks=counts["singleflight_fallbacks"],
        stale_served=counts["stale_served"],
        origin_calls=counts["origin_calls"],
        origin_ms_total=counts["origin_ms_total"],
        cache_ms_total=counts["cache_ms_total"],
        errors=counts["errors"],
        hit_ratio=counts["hits"] / requests if requests else None,
        byte_hit_ratio=counts["hit_bytes"] / volume if volume else None,
    )


def metrics_read(
    window_minutes: int, *, now: float | None = None
) -> dict[str, NamespaceMetrics]:
    """Return each namespace's counters summed over the last ``window_minutes``.

    The window is the minute containing ``now`` (default: the current time) and the
    ``window_minutes - 1`` minutes before it. This process's buffer is flushed first,
    so its own recent events are included. The entry ``REDIS_TOTALS`` carries the
    server-wide ``evictions`` and ``expiries`` from ``INFO stats`` (all time, all
    databases), the only form in which Redis reports them.
    """
    if window_minutes < 1:
        raise ValueError(f"a window is at least one minute, got {window_minutes!r}")
    metrics_flush()
    client = cache_redis()
    last = _minute(time.time() if now is None else now)
    minutes = range(last - window_minutes + 1, last + 1)
    members = cast(set[bytes], client.smembers(NAMESPACES_KEY))
    namespaces = sorted(member.decode() for member in members)
    pipe = client.pipeline(transaction=False)
    for namespace in namespaces:
        for minute in minutes:
            pipe.hgetall(_bucket_key(namespace, minute))
    pipe.info("stats")
    *buckets, stats = pipe.execute()
    report: dict[str, NamespaceMetrics] = {}
    for index, namespace in enumerate(namespaces):
        totals = dict.fromkeys(COUNTERS, 0)
        start = index * len(minutes)
        for bucket in buckets[start : start + len(minutes)]:
            for field, amount in bucket.items():
                name = field.decode()
                if name in totals:
                    totals[name] += int(amount)
        if any(totals.values()):
            report[namespace] = metrics_from_counts(totals)
    server = dict.fromkeys(COUNTERS, 0)
    server["evictions"] = int(stats.get("evicted_keys", 0))
    server["expiries"] = int(stats.get("expired_keys", 0))
    report[REDIS_TOTALS] = metrics_from_counts(server)
    return report


def metrics_reset(namespace: str | None = None) -> None:
    """Forget the counters of ``namespace`` (default: all), buffered and stored."""
    global _buffer, _buffered_events
    with _buffer_lock:
        if namespace is None:
            _buffer = defaultdict(lambda: defaultdict(int))
            _buffered_events = 0
        else:
            for bucket in [bucket for bucket in _buffer if bucket[0] == namespace]:
                del _buffer[bucket]
    client = cache_redis()
    if namespace is None:
        pattern = f"{KEY_PREFIX}:*"
    else:
        _check_namespace(namespace)
        # Escape SCAN's glob characters so "a*" cannot match namespace "ab".
        literal = re.sub(r"([*?\[\]\\])", r"\\\1", namespace)
        pattern = f"{KEY_PREFIX}:{literal}:*"
        client.srem(NAMESPACES_KEY, namespace)
    # SCAN, not KEYS: an operator action on a live server must not block it.
    doomed = list(client.scan_iter(match=pattern, count=500))
    for start in range(0, len(doomed), 500):
        client.delete(*doomed[start : start + 500])
