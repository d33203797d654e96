"""Stale-while-revalidate: serve a stale entry at once, refresh in the background.

A Redis error on the read path is answered from the origin, like cache-aside's; a
failing background refresh leaves the stale entry serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis
from django.db import connections

from jobs.locks import LeaseLock
from library.cache.metrics import (
    cache_redis,
    metrics_record,
    redis_failed,
    redis_usable,
)
from library.cache.singleflight import lock_acquire, single_flight
from library.cache.store.aside import (
    DEFAULT_LEASE_MS,
    DEFAULT_WAIT_MS,
    measured,
    origin_only,
    redis_read,
    redis_write,
)
from library.cache.store.codec import decode, ms_since
from library.cache.store.switch import cache_enabled
from library.cache.ttl import lifetime_capped

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The stored form is {"f": <fresh until, ms since the epoch>, "v": <value>}. The entry
# lives fresh_s + stale_s in Redis; past "f" it is still served, and one refresh runs.
# "f" is wall-clock time, so the processes sharing a Redis need synchronised clocks
# (NTP); a skew of a second shifts the fresh/stale boundary by that second. The
# ``clock`` of ``stale_while_revalidate`` (``time.time`` unless a test steps its own
# across the boundary) both stamps "f" and compares against it.

_refreshes: set[threading.Thread] = set()
_refreshes_lock = threading.Lock()


def _envelope(data: bytes, fresh_s: float, clock: Callable[[], float]) -> bytes:
    fresh_until_ms = round((clock() + fresh_s) * 1000)
    return b'{"f":%d,"v":%s}' % (fresh_until_ms, data)


def _swr_lifetime_ms(fresh_s: float, stale_s: float) -> int:
    if stale_s < 0:
        raise ValueError(f"stale time cannot be negative, got {stale_s!r}")
    return max(1, round(lifetime_capped(fresh_s + stale_s) * 1000))


def _is_fresh(entry: dict[str, Any], clock: Callable[[], float]) -> bool:
    return bool(clock() * 1000 < entry["f"])


def stale_while_revalidate(
    *,
    key: str,
    namespace: str,
    produce: Callable[[], T],
    fresh_s: float,
    stale_s: float,
    lease_ms: int = DEFAULT_LEASE_MS,
    wait_ms: int = DEFAULT_WAIT_MS,
    clock: Callable[[], float] = time.time,
) -> tuple[T, bool]:
    """Return ``(value, stale)`` for ``key``, never waiting for a refresh.

    A fresh entry is returned as is. A stale one (older than ``fresh_s``, younger
    than ``fresh_s + stale_s``) is returned at once, and one background refresh is
    started across all processes (the single-flight lock decides which caller
    starts it). Without an entry the value is produced now, once (single-flight).
    ``clock`` is the wall clock (seconds since the epoch) of the fresh-until stamps.
    """
    lifetime_ms = _swr_lifetime_ms(fresh_s, stale_s)
    if not cache_enabled():
        return origin_only(produce, namespace), False
    if not redis_usable():
        return origin_only(produce, namespace), False
    start = time.perf_counter()
    try:
        raw = cache_redis().get(key)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="stale-while-revalidate read")
        return origin_only(produce, namespace), False
    lookup_ms = ms_since(start)
    if raw is not None:
        data = cast(bytes, raw)
        entry = decode(data)
        if _is_fresh(entry, clock):
            metrics_record(
                namespace, hits=1, hit_bytes=len(data), cache_ms_total=lookup_ms
            )
            return cast(T, entry["v"]), False
        metrics_record(
            namespace,
            hits=1,
            stale_served=1,
            hit_bytes=len(data),
            cache_ms_total=lookup_ms,
        )
        _refresh_start(key, namespace, produce, fresh_s, lifetime_ms, lease_ms, clock)
        return cast(T, entry["v"]), True
    produce_bytes = measured(produce, namespace)

    def produce_envelope() -> bytes:
        return _envelope(produce_bytes(), fresh_s, clock)

    data, _ = single_flight(
        key,
        produce_envelope,
        lease_ms=lease_ms,
        wait_ms=wait_ms,
        namespace=namespace,
        read=redis_read(key),
        write=redis_write(key, lifetime_ms, namespace),
    )
    metrics_record(namespace, misses=1, miss_bytes=len(data), cache_ms_total=lookup_ms)
    return cast(T, decode(data)["v"]), False


def _refresh_start(
    key: str,
    namespace: str,
    produce: Callable[[], T],
    fresh_s: float,
    lifetime_ms: int,
    lease_ms: int,
    clock: Callable[[], float],
) -> None:
    """Start the background refresh of ``key`` unless some process already has."""
    try:
        lock = lock_acquire(key, lease_ms)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="refresh lock")
        return
    if lock is None:
        return  # a refresh is running somewhere; the stale value serves until then
    thread = threading.Thread(
        target=_refresh,
        args=(key, lock, namespace, produce, fresh_s, lifetime_ms, clock),
        name=f"cache-refresh {key}",
        daemon=True,
    )
    with _refreshes_lock:
        _refreshes.add(thread)
    thread.start()


def _refresh(
    key: str,
    lock: LeaseLock,
    namespace: str,
    produce: Callable[[], T],
    fresh_s: float,
    lifetime_ms: int,
    clock: Callable[[], float],
) -> None:
    """Produce and store a fresh entry, holding the lock taken by ``_refresh_start``.

    1. Look again: a refresh that finished just before this lock was taken has
       already stored a fresh entry, and producing again would be a wasted call.
    2. Produce, wrap with the new fresh-until time, store with the full lifetime.
    3. Release the lock (owner-checked) and close this thread's database
       connections, which Django would otherwise leave open until the thread dies.
    """
    try:
        raw = cache_redis().get(key)
        if raw is not None and _is_fresh(decode(cast(bytes, raw)), clock):
            return
        data = _envelope(measured(produce, namespace)(), fresh_s, clock)
        cache_redis().set(key, data, px=lifetime_ms)
        metrics_record(namespace, sets=1)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="background refresh")
    except Exception:
        # The stale entry keeps serving; the next stale read tries again.
        logger.exception("cache: background refresh of %s failed", key)
    finally:
        try:
            lock.release_if_owned()
        except redis.RedisError as error:
            redis_failed(error, namespace=namespace, during="refresh release")
        connections.close_all()
        with _refreshes_lock:
            _refreshes.discard(threading.current_thread())


def refreshes_wait(timeout_s: float = 10.0) -> bool:
    """Wait for this process's background refreshes; return False on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        with _refreshes_lock:
            running = list(_refreshes)
        if not running:
            return True
        for thread in running:
            thread.join(max(0.0, deadline - time.monotonic()))
        if time.monotonic() >= deadline:
            with _refreshes_lock:
                return not _refreshes
