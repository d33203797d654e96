"""The Redis client the cache primitives share, one per URL in a process.

Each client carries a "degraded until" mark: after a Redis error (see
``library.cache.metrics.redis_failed``) the read paths skip Redis for a moment and
go to the origin, so a dead or hung server costs one timeout per moment instead of
one per request.
"""

from __future__ import annotations

import threading
import time

import redis
from django.conf import settings
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

__all__ = ["cache_redis", "degrade_for", "redis_usable"]


class _Connection:
    """One client per Redis URL in this process, with its degraded-until mark."""

    def __init__(self, url: str) -> None:
        # Short timeouts and a single quick retry: a cache that waits seconds for a
        # sick server is worse than no cache. The retry covers an idle connection
        # the server closed; more retries would only stretch an outage.
        self.client: redis.Redis = redis.Redis.from_url(
            url,
            socket_connect_timeout=0.5,
            socket_timeout=1.0,
            retry=Retry(ExponentialBackoff(cap=0.05, base=0.005), 1),
            health_check_interval=30,
        )
        self.degraded_until = 0.0


_connections: dict[str, _Connection] = {}
_connections_lock = threading.Lock()


def _connection() -> _Connection:
    # Keyed by URL, read when called (never at import): a settings override in a
    # test or a lab gets its own client, and the default one is left untouched.
    url: str = settings.REDIS_URL
    found = _connections.get(url)
    if found is None:
        with _connections_lock:
            found = _connections.setdefault(url, _Connection(url))
    return found


def cache_redis() -> redis.Redis:
    """Return this process's Redis client for the cache (one per ``REDIS_URL``)."""
    return _connection().client


def redis_usable() -> bool:
    """Return False while the read paths should bypass Redis after an error."""
    return time.monotonic() >= _connection().degraded_until


def degrade_for(seconds: float) -> None:
    """Make the current URL's read paths skip Redis for the next ``seconds``."""
    _connection().degraded_until = time.monotonic() + seconds
