"""Single-flight: one production per key, however many callers ask at the same time.

Two levels, because callers compete in two places:

1. Threads of one process share a ``_Flight`` (a result slot and an event) found in a
   dictionary under a lock: the first caller for a key produces, the others wait for
   its result. This costs no Redis round trip and still works while Redis is down.
2. Processes (several daphne instances, rq workers, other hosts) compete for a Redis
   lock ``sf:<key>``, a ``jobs.locks.LeaseLock`` (``SET NX PX lease_ms`` with a
   random owner token). The owner produces, stores the value under the key, then
   releases the lock with redis-py's owner-checked script, so a producer whose lease
   ran out can never delete the lock a newer owner holds. The others poll for the
   value with growing sleeps for up to ``wait_ms`` (their own loop, not the lock's
   blocking acquire: between attempts they look for the value); past that they
   produce themselves (a *fallback*, counted apart). A producer that crashed leaves
   a lock that dies with its lease; a waiter that finds the lock gone takes it over
   instead of waiting out the whole ``wait_ms``.

``lease_ms`` is the promise "a production finishes within this time"; it should be
comfortably longer than the slowest origin call, or a second producer may start.
"""

from __future__ import annotations

import enum
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar, cast

import redis

from jobs.locks import LeaseLock
from library.cache.metrics import cache_redis, metrics_record, redis_failed

__all__ = [
    "DEFAULT_NAMESPACE",
    "MISSING",
    "Missing",
    "fill_lock",
    "flight_waiters",
    "lock_acquire",
    "lock_key",
    "single_flight",
]

T = TypeVar("T")

DEFAULT_NAMESPACE: Final = "singleflight"
DEFAULT_LIFETIME_S: Final = 60
FIRST_POLL_S: Final = 0.005
MAX_POLL_S: Final = 0.1
LOCK_PREFIX: Final = "sf:"


class Missing(enum.Enum):
    """The "no value stored" answer of a reader (``None`` can be a stored value)."""

    MISSING = enum.auto()


MISSING: Final = Missing.MISSING


def lock_key(key: str) -> str:
    """Return the name of the single-flight lock guarding ``key``."""
    return f"{LOCK_PREFIX}{key}"


def fill_lock(key: str, lease_ms: int) -> LeaseLock:
    """Return a new lock on ``key``'s single-flight lock, not yet acquired.

    Its token is random; ``release_if_owned`` gives the lock back only while that
    token still holds it. Any thread may release it (a background refresh does).
    """
    return LeaseLock(
        cache_redis(),
        key,
        lease_ms=lease_ms,
        owner=secrets.token_hex(16),
        prefix=LOCK_PREFIX,
    )


def lock_acquire(key: str, lease_ms: int) -> LeaseLock | None:
    """Take the single-flight lock of ``key`` for ``lease_ms``; return the lock.

    Return None when another owner holds it. Redis errors propagate.
    """
    lock = fill_lock(key, lease_ms)
    return lock if lock.acquire() else None


def _json_reader(key: str) -> Callable[[], Any]:
    def read() -> Any:
        raw = cache_redis().get(key)
        return MISSING if raw is None else json.loads(cast(bytes, raw))

    return read


def _json_writer(key: str, lifetime_s: int) -> Callable[[Any], None]:
    def write(value: Any) -> None:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        cache_redis().set(key, data.encode(), ex=lifetime_s)

    return write


class _Flight(Generic[T]):
    """One production in progress in this process, shared by its threads."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None
        self.waiters = 0  # the threads that joined it instead of producing


_flights: dict[str, _Flight[Any]] = {}
_flights_lock = threading.Lock()


def flight_waiters(key: str) -> int:
    """Return how many threads of this process wait for the production of ``key``.

    0 when none runs. A test waits for this instead of guessing how long the other
    callers take to arrive.
    """
    with _flights_lock:
        flight = _flights.get(key)
        return 0 if flight is None else flight.waiters


def single_flight(
    key: str,
    produce: Callable[[], T],
    *,
    lease_ms: int,
    wait_ms: int,
    namespace: str = DEFAULT_NAMESPACE,
    read: Callable[[], T | Missing] | None = None,
    write: Callable[[T], None] | None = None,
    lifetime_s: int = DEFAULT_LIFETIME_S,
) -> tuple[T, bool]:
    """Return ``(value, produced)``: the value of ``key``, produced once for everyone.

    ``produced`` is True when this call ran ``produce``. ``read`` and ``write`` are
    how waiters in other processes find the producer's value; by default the value
    is stored as compact JSON under ``key`` for ``lifetime_s``. An exception from
    ``produce`` reaches every caller sharing the production. Redis errors are
    counted and the call carries on with in-process sharing only.
    """
    with _flights_lock:
        flight = _flights.get(key)
        leader = flight is None
        if flight is None:
            flight = _flights[key] = _Flight()
        else:
            flight.waiters += 1
    if not leader:
        # The lease bounds a production; a leader silent past lease + wait is stuck
        # (or its origin is), and waiting longer helps nobody.
        if flight.done.wait((lease_ms + wait_ms) / 1000):
            if flight.error is not None:
                raise flight.error
            metrics_record(namespace, singleflight_saved=1)
            return cast(T, flight.value), False
        metrics_record(namespace, singleflight_fallbacks=1)
        return produce(), True
    try:
        value, produced = _across_processes(
            key,
            produce,
            lease_ms=lease_ms,
            wait_ms=wait_ms,
            namespace=namespace,
            read=read or _json_reader(key),
            write=write or _json_writer(key, lifetime_s),
        )
    except BaseException as error:
        flight.error = error
        raise
    else:
        flight.value = value
        return value, produced
    finally:
        # Unregister before waking the waiters: a caller arriving after this point
        # starts a new flight and finds the stored value instead of a finished one.
        with _flights_lock:
            del _flights[key]
        flight.done.set()


def _across_processes(
    key: str,
    produce: Callable[[], T],
    *,
    lease_ms: int,
    wait_ms: int,
    namespace: str,
    read: Callable[[], T | Missing],
    write: Callable[[T], None],
) -> tuple[T, bool]:
    """Produce under the Redis lock, or wait for the owner's value (see module doc)."""
    deadline = time.monotonic() + wait_ms / 1000
    pause = FIRST_POLL_S
    try:
        while True:
            lock = lock_acquire(key, lease_ms)
            if lock is not None:
                return _produce_as_owner(lock, produce, read, write, namespace)
            found = read()
            if not isinstance(found, Missing):
                metrics_record(namespace, singleflight_saved=1)
                return found, False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, MAX_POLL_S)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="single-flight")
        return produce(), True
    # The owner is too slow: serve this caller rather than keep it waiting, and keep
    # the owner's lock (it will store its own, equally fresh, value).
    metrics_record(namespace, singleflight_fallbacks=1)
    value = produce()
    _write_quietly(write, value, namespace)
    return value, True


def _produce_as_owner(
    lock: LeaseLock,
    produce: Callable[[], T],
    read: Callable[[], T | Missing],
    write: Callable[[T], None],
    namespace: str,
) -> tuple[T, bool]:
    try:
        # The previous owner may have stored the value and released the lock
        # between this caller's miss and its lock; look again before producing.
        found = read()
        if not isinstance(found, Missing):
            metrics_record(namespace, singleflight_saved=1)
            return found, False
        value = produce()
        # Store before releasing: a waiter that sees the lock gone must find the value.
        _write_quietly(write, value, namespace)
        return value, True
    finally:
        try:
            lock.release_if_owned()
        except redis.RedisError as error:
            # The lease frees the lock anyway; only the waiters wait a little longer.
            redis_failed(error, namespace=namespace, during="single-flight release")


def _write_quietly(write: Callable[[T], None], value: T, namespace: str) -> None:
    try:
        write(value)
    except redis.RedisError as error:
        redis_failed(error, namespace=namespace, during="single-flight store")
