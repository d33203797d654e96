"""Per-minute limits on work a request makes the web process do (a model run).

A fixed window in the site's cache (Redis), so every web process counts together.
Without Redis the work goes ahead: these limits protect the processes' CPU, they are
not a record anybody relies on, and refusing every learner during an outage would
be worse than serving a few too many.
"""

from __future__ import annotations

import logging
import math
import time

import redis
from django.core.cache import cache

log = logging.getLogger("course.ratelimits")

WINDOW_S = 60


def minute_take(scope: str, who: str, limit: int) -> int | None:
    """Count one unit of ``scope`` for ``who`` in this minute's window; return the
    seconds until the next window when ``limit`` is spent, None when it may go."""
    now = time.time()
    window = int(now // WINDOW_S)
    key = f"course:{scope}:{who}:{window}"
    try:
        cache.add(key, 0, timeout=2 * WINDOW_S)
        count = cache.incr(key)
    except (redis.RedisError, OSError, ValueError) as error:
        log.warning("%s rate limit unavailable: %s", scope, error)
        return None
    if count <= limit:
        return None
    return max(1, math.ceil((window + 1) * WINDOW_S - now))
