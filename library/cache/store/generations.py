"""Generation counters: one bump retires every entry keyed with the old generation.

``generation_bump`` raises on a Redis error, because a lost bump leaves whole pages
stale.
"""

from __future__ import annotations

from typing import cast

import redis

from library.cache.metrics import cache_redis, redis_failed, redis_usable
from library.cache.store.local import local_tier
from library.cache.store.versions import RETIRE_BELOW


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
    generations: list[tuple[str, str]],
    *,
    delete: tuple[str, ...] = (),
    retire_below: tuple[tuple[str, int], ...] = (),
) -> list[int]:
    """Bump several generations and delete ``delete`` keys in one round trip.

    ``retire_below`` holds (version record, version) pairs: each record older than
    its version is deleted (``versions.RETIRE_BELOW``). Same contract as
    ``generation_bump``; one MULTI, so they all happen or none.
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
    for key, version in retire_below:
        pipe.eval(RETIRE_BELOW, 1, key, version)
    replies = pipe.execute()
    return [int(v) for v in replies[1 : 2 * len(generations) : 2]]
