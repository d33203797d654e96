"""The read and write strategies the views call: cache-aside, write-through,
stale-while-revalidate, deletes and generation counters.

Values are stored as compact JSON bytes and every size counted in the metrics is the
length of those bytes. Values must therefore survive a JSON round trip: dicts with
text keys, lists, text, numbers, booleans and None (a tuple comes back as a list).

Failure rule: the cache must never take the site down. A Redis error on a read path
is counted, logged at most once a minute, and the request is answered from the origin
(``produce``); for a second afterwards the read paths skip Redis altogether
(``metrics.redis_usable``). ``write_through`` and ``cache_delete`` return False
instead of raising, so the caller (an on-commit hook, an invalidation subscriber) can
retry; ``generation_bump`` raises, because a lost bump leaves whole pages stale.

Kill switch: the environment variable ``LIBRARY_CACHE`` = ``on`` (the default) or
``off`` is read once per process, at the first ``cache_aside`` or
``stale_while_revalidate`` call (not at import). With ``off`` both call ``produce``
directly on every request, never touching Redis or the local tier, and still record
the origin metrics (``misses``, ``origin_calls``), so an uncached instance can be
measured beside a cached one. Any other value is logged and treated as ``on``.

Preconditions: like every Redis call in this project, none of these run inside
``transaction.atomic()``; writes go in ``transaction.on_commit`` so the cache never
holds a value whose transaction rolled back.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import redis
from django.db import connections

from library.cache.metrics import (
    cache_redis,
    metrics_record,
    redis_failed,
    redis_usable,
)
from library.cache.singleflight import (
    MISSING,
    Missing,
    lock_acquire,
    lock_release,
    single_flight,
)
from library.cache.ttl import lifetime_capped, lifetime_with_jitter

__all__ = [
    "LOCAL_MAX_ENTRIES",
    "LocalTier",
    "cache_aside",
    "cache_delete",
    "cache_enabled",
    "decode",
    "encode",
    "generation_bump",
    "generation_get",
    "generation_key",
    "generations_bump",
    "local_tier",
    "refreshes_wait",
    "stale_while_revalidate",
    "write_through",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

LOCAL_MAX_ENTRIES: Final = 512
DEFAULT_LEASE_MS: Final = 5_000
DEFAULT_WAIT_MS: Final = 3_000


CACHE_SWITCH_VARIABLE: Final = "LIBRARY_CACHE"

_switch: bool | None = None
_switch_lock = threading.Lock()


def _switch_read() -> bool:
    raw = os.environ.get(CACHE_SWITCH_VARIABLE, "on").strip().lower()
    if raw in ("", "on"):
        return True
    if raw == "off":
        logger.warning(
            "cache: %s=off, every read goes to the origin", CACHE_SWITCH_VARIABLE
        )
        return False
    logger.warning(
        "cache: %s=%r is neither on nor off; the cache stays on",
        CACHE_SWITCH_VARIABLE,
        raw,
    )
    return True


def cache_enabled() -> bool:
    """Return whether the read strategies use the cache (``LIBRARY_CACHE``).

    The variable is read at the first call in this process and remembered.
    """
    global _switch
    if _switch is None:
        with _switch_lock:
            if _switch is None:
                _switch = _switch_read()
    return _switch


def encode(value: object) -> bytes:
    """Return ``value`` as compact JSON bytes (the stored form)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def decode(data: bytes) -> Any:
    """Return the value stored as ``data``."""
    return json.loads(data)


def _ms_since(start: float) -> int:
    return round((time.perf_counter() - start) * 1000)


# --- the in-process tier ------------------------------------------------------------


class LocalTier:
    """A small in-process map of key -> stored bytes, each with its own expiry.

    For hot keys only: it saves the network round trip, but another process's write
    or delete cannot reach it, so its lifetime (a few seconds) is how stale a hot
    value may get. Bytes, not objects, are kept: every caller decodes its own copy
    and cannot change what the next caller sees. Least recently used entries go
    first when the bound is reached.
    """

    def __init__(self, max_entries: int = LOCAL_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, *, namespace: str) -> bytes | None:
        """Return the live bytes of ``key``, or None; an expired entry is dropped."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= time.monotonic():
                del self._entries[key]
                expired = True
            else:
                self._entries.move_to_end(key)
                return entry[1]
        if expired:
            metrics_record(namespace, expiries=1)
        return None

    def put(self, key: str, data: bytes, *, lifetime_s: float, namespace: str) -> None:
        """Keep ``data`` for ``lifetime_s`` seconds, dropping the oldest if full."""
        evicted = 0
        with self._lock:
            self._entries[key] = (time.monotonic() + lifetime_s, data)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                evicted += 1
        if evicted:
            metrics_record(namespace, evictions=evicted)

    def discard(self, key: str) -> None:
        """Forget ``key`` in this process."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget every entry in this process."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


local_tier = LocalTier()


# --- cache-aside --------------------------------------------------------------------


def _measured(produce: Callable[[], T], namespace: str) -> Callable[[], bytes]:
    """Wrap ``produce`` so each origin call is timed and the value stored as bytes."""

    def produce_bytes() -> bytes:
        start = time.perf_counter()
        value = produce()
        metrics_record(namespace, origin_calls=1, origin_ms_total=_ms_since(start))
        return encode(value)

    return produce_bytes


def _origin_only(produce: Callable[[], T], namespace: str) -> T:
    start = time.perf_counter()
    value = produce()
    metrics_record(
        namespace,
        misses=1,
        miss_bytes=len(encode(value)),
        origin_calls=1,
        origin_ms_total=_ms_since(start),
    )
    return value


def _redis_read(key: str) -> Callable[[], bytes | Missing]:
    def read() -> bytes | Missing:
        raw = cache_redis().get(key)
        return MISSING if raw is None else cast(bytes, raw)

    return read


def _redis_write(key: str, lifetime_ms: int, namespace: str) -> Callable[[bytes], None]:
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
        return _origin_only(produce, namespace)
    if local_s > 0:
        local = local_tier.get(key, namespace=namespace)
        if local is not None:
            metrics_record(namespace, hits=1, local_hits=1, hit_bytes=len(local))
            return cast(T, decode(local))
    if not redis_usable():
        return _origin_only(produce, namespace)
    start = time.perf_counter()
    try:
        raw = cache_redis().get(key)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="cache-aside read")
        return _origin_only(produce, namespace)
    lookup_ms = _ms_since(start)
    data: bytes
    if raw is not None:
        data = cast(bytes, raw)
        metrics_record(namespace, hits=1, hit_bytes=len(data), cache_ms_total=lookup_ms)
    else:
        lifetime_ms = lifetime_with_jitter(key, lifetime_s, jitter_s) * 1000
        produce_bytes = _measured(produce, namespace)
        write = _redis_write(key, lifetime_ms, namespace)
        if singleflight:
            data, _ = single_flight(
                key,
                produce_bytes,
                lease_ms=lease_ms,
                wait_ms=wait_ms,
                namespace=namespace,
                read=_redis_read(key),
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


# --- stale-while-revalidate ---------------------------------------------------------
#
# The stored form is {"f": <fresh until, ms since the epoch>, "v": <value>}. The entry
# lives fresh_s + stale_s in Redis; past "f" it is still served, and one refresh runs.
# "f" is wall-clock time, so the processes sharing a Redis need synchronised clocks
# (NTP); a skew of a second shifts the fresh/stale boundary by that second.

_refreshes: set[threading.Thread] = set()
_refreshes_lock = threading.Lock()


def _envelope(data: bytes, fresh_s: float) -> bytes:
    fresh_until_ms = round((time.time() + fresh_s) * 1000)
    return b'{"f":%d,"v":%s}' % (fresh_until_ms, data)


def _swr_lifetime_ms(fresh_s: float, stale_s: float) -> int:
    if stale_s < 0:
        raise ValueError(f"stale time cannot be negative, got {stale_s!r}")
    return max(1, round(lifetime_capped(fresh_s + stale_s) * 1000))


def _is_fresh(entry: dict[str, Any]) -> bool:
    return bool(time.time() * 1000 < entry["f"])


def stale_while_revalidate(
    *,
    key: str,
    namespace: str,
    produce: Callable[[], T],
    fresh_s: float,
    stale_s: float,
    lease_ms: int = DEFAULT_LEASE_MS,
    wait_ms: int = DEFAULT_WAIT_MS,
) -> tuple[T, bool]:
    """Return ``(value, stale)`` for ``key``, never waiting for a refresh.

    A fresh entry is returned as is. A stale one (older than ``fresh_s``, younger
    than ``fresh_s + stale_s``) is returned at once, and one background refresh is
    started across all processes (the single-flight lock decides which caller
    starts it). Without an entry the value is produced now, once (single-flight).
    """
    lifetime_ms = _swr_lifetime_ms(fresh_s, stale_s)
    if not cache_enabled():
        return _origin_only(produce, namespace), False
    if not redis_usable():
        return _origin_only(produce, namespace), False
    start = time.perf_counter()
    try:
        raw = cache_redis().get(key)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="stale-while-revalidate read")
        return _origin_only(produce, namespace), False
    lookup_ms = _ms_since(start)
    if raw is not None:
        data = cast(bytes, raw)
        entry = decode(data)
        if _is_fresh(entry):
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
        _refresh_start(key, namespace, produce, fresh_s, lifetime_ms, lease_ms)
        return cast(T, entry["v"]), True
    produce_bytes = _measured(produce, namespace)

    def produce_envelope() -> bytes:
        return _envelope(produce_bytes(), fresh_s)

    data, _ = single_flight(
        key,
        produce_envelope,
        lease_ms=lease_ms,
        wait_ms=wait_ms,
        namespace=namespace,
        read=_redis_read(key),
        write=_redis_write(key, lifetime_ms, namespace),
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
) -> None:
    """Start the background refresh of ``key`` unless some process already has."""
    try:
        token = lock_acquire(key, lease_ms)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="refresh lock")
        return
    if token is None:
        return  # a refresh is running somewhere; the stale value serves until then
    thread = threading.Thread(
        target=_refresh,
        args=(key, token, namespace, produce, fresh_s, lifetime_ms),
        name=f"cache-refresh {key}",
        daemon=True,
    )
    with _refreshes_lock:
        _refreshes.add(thread)
    thread.start()


def _refresh(
    key: str,
    token: str,
    namespace: str,
    produce: Callable[[], T],
    fresh_s: float,
    lifetime_ms: int,
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
        if raw is not None and _is_fresh(decode(cast(bytes, raw))):
            return
        data = _envelope(_measured(produce, namespace)(), fresh_s)
        cache_redis().set(key, data, px=lifetime_ms)
        metrics_record(namespace, sets=1)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="background refresh")
    except Exception:
        # The stale entry keeps serving; the next stale read tries again.
        logger.exception("cache: background refresh of %s failed", key)
    finally:
        try:
            lock_release(key, token)
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


# --- generation counters ------------------------------------------------------------


def generation_key(namespace: str, tenant: str) -> str:
    """Return the Redis key of the generation counter of ``namespace``/``tenant``."""
    return f"gen:{namespace}:{tenant}"


def generation_get(namespace: str, tenant: str) -> int:
    """Return the current generation of ``namespace``/``tenant`` (1 until bumped).

    Put it in the key of every entry that one event must retire at once (a branch's
    list pages). When Redis cannot answer, return 0: a generation no bump ever
    produces, so entries written meanwhile cannot be mistaken for current ones once
    Redis is back (and the read paths skip Redis for a while anyway).
    """
    if not redis_usable():
        return 0
    try:
        raw = cache_redis().get(generation_key(namespace, tenant))
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="generation read")
        return 0
    return 1 if raw is None else int(cast(bytes, raw))


def generation_bump(namespace: str, tenant: str) -> int:
    """Advance the generation of ``namespace``/``tenant`` and return the new value.

    Every key built with the old generation becomes unreachable in one step; those
    entries are never deleted, they age out by their lifetime. The counter has no
    expiry: if it vanished, the generation would restart at 1 and bring back
    entries that are still alive (so run Redis with a ``volatile-*`` eviction policy,
    which only evicts keys that have an expiry). Redis errors propagate: a lost bump
    is a stale page, and the caller (an at-least-once subscriber) must retry.
    """
    return generations_bump([(namespace, tenant)])[0]


def generations_bump(
    generations: list[tuple[str, str]], *, delete: tuple[str, ...] = ()
) -> list[int]:
    """Bump several generations and delete ``delete`` keys in one round trip.

    Same contract as ``generation_bump``; one MULTI, so they all happen or none.
    """
    for key in delete:
        local_tier.discard(key)
    pipe = cache_redis().pipeline(transaction=True)
    for namespace, tenant in generations:
        # SET NX first: a counter that never existed stands at the default 1, so the
        # first bump must give 2, not INCR's 1.
        pipe.set(generation_key(namespace, tenant), 1, nx=True)
        pipe.incr(generation_key(namespace, tenant))
    for key in delete:
        pipe.delete(key)
    replies = pipe.execute()
    return [int(v) for v in replies[1 : 2 * len(generations) : 2]]
