"""Cache-aside reads, write-through writes and deletes.

Failure rule: a Redis error on the read path is counted, logged at most once a minute,
and the request is answered from the origin (``produce``). ``write_through`` and
``cache_delete`` return False instead of raising, so the caller (an on-commit hook, an
invalidation subscriber) can retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, TypeVar, cast

import redis

from library.cache.metrics import (
    cache_redis,
    metrics_record,
    redis_failed,
    redis_usable,
)
from library.cache.singleflight import MISSING, Missing, single_flight
from library.cache.store.codec import decode, encode, ms_since
from library.cache.store.local import local_tier
from library.cache.store.switch import cache_enabled
from library.cache.ttl import lifetime_with_jitter

T = TypeVar("T")

DEFAULT_LEASE_MS: Final = 5_000
DEFAULT_WAIT_MS: Final = 3_000


def measured(produce: Callable[[], T], namespace: str) -> Callable[[], bytes]:
    """Wrap ``produce`` so each origin call is timed and the value stored as bytes."""

    def produce_bytes() -> bytes:
        start = time.perf_counter()
        value = produce()
        metrics_record(namespace, origin_calls=1, origin_ms_total=ms_since(start))
        return encode(value)

    return produce_bytes


def origin_only(produce: Callable[[], T], namespace: str) -> T:
    start = time.perf_counter()
    value = produce()
    metrics_record(
        namespace,
        misses=1,
        miss_bytes=len(encode(value)),
        origin_calls=1,
        origin_ms_total=ms_since(start),
    )
    return value


def redis_read(key: str) -> Callable[[], bytes | Missing]:
    def read() -> bytes | Missing:
        raw = cache_redis().get(key)
        return MISSING if raw is None else cast(bytes, raw)

    return read


def redis_write(key: str, lifetime_ms: int, namespace: str) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        cache_redis().set(key, data, px=lifetime_ms)
        metrics_record(namespace, sets=1)

    return write


def cache_aside(
    *,
    key: str,
    namespace: str,
    produce: Callable[[], T],
    lifetime_s: int,
    jitter_s: int = 0,
    local_s: float = 0,
    singleflight: bool = True,
    lease_ms: int = DEFAULT_LEASE_MS,
    wait_ms: int = DEFAULT_WAIT_MS,
) -> T:
    """Return the value of ``key``: local tier, then Redis, then ``produce``.

    On a miss the value is produced once across threads and processes (unless
    ``singleflight`` is False) and stored for ``lifetime_s`` plus the key's jitter
    in ``[0, jitter_s)``. ``local_s > 0`` also keeps it in this process for that
    many seconds, for hot keys that tolerate that much staleness.
    """
    if not cache_enabled():
        return origin_only(produce, namespace)
    if local_s > 0:
        local = local_tier.get(key, namespace=namespace)
        if local is not None:
            metrics_record(namespace, hits=1, local_hits=1, hit_bytes=len(local))
            return cast(T, decode(local))
    if not redis_usable():
        return origin_only(produce, namespace)
    start = time.perf_counter()
    try:
        raw = cache_redis().get(key)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="cache-aside read")
        return origin_only(produce, namespace)
    lookup_ms = ms_since(start)
    data: bytes
    if raw is not None:
        data = cast(bytes, raw)
        metrics_record(namespace, hits=1, hit_bytes=len(data), cache_ms_total=lookup_ms)
    else:
        lifetime_ms = lifetime_with_jitter(key, lifetime_s, jitter_s) * 1000
        produce_bytes = measured(produce, namespace)
        write = redis_write(key, lifetime_ms, namespace)
        if singleflight:
            data, _ = single_flight(
                key,
                produce_bytes,
                lease_ms=lease_ms,
                wait_ms=wait_ms,
                namespace=namespace,
                read=redis_read(key),
                write=write,
            )
        else:
            data = produce_bytes()
            try:
                write(data)
            except redis.RedisError as error:
                redis_failed(error, namespace=namespace, during="cache-aside store")
        metrics_record(
            namespace, misses=1, miss_bytes=len(data), cache_ms_total=lookup_ms
        )
    if local_s > 0:
        local_tier.put(key, data, lifetime_s=local_s, namespace=namespace)
    return cast(T, decode(data))


def write_through(
    *, key: str, namespace: str, value: object, lifetime_s: int, jitter_s: int = 0
) -> bool:
    """Store the new ``value`` of ``key`` right away; return whether Redis took it.

    Call after the write that produced ``value`` has committed. This process's local
    copy is dropped (other processes keep theirs until their ``local_s`` runs out).
    """
    local_tier.discard(key)
    lifetime_ms = lifetime_with_jitter(key, lifetime_s, jitter_s) * 1000
    try:
        cache_redis().set(key, encode(value), px=lifetime_ms)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="write-through")
        return False
    metrics_record(namespace, sets=1)
    return True


def cache_delete(key: str, *, namespace: str = "cache") -> bool:
    """Remove ``key`` from Redis and from this process's local tier.

    Return False when Redis could not be reached (the entry may still be there).
    """
    local_tier.discard(key)
    try:
        cache_redis().delete(key)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="delete")
        return False
    return True
