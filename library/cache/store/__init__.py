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

The strategies live in sub-modules by concern, all re-exported here:
``codec`` (the stored form), ``switch`` (the kill switch), ``local`` (the in-process
tier), ``aside`` (cache-aside, write-through, deletes), ``revalidate``
(stale-while-revalidate) and ``generations`` (generation counters).
"""

from __future__ import annotations

from library.cache.store.aside import cache_aside, cache_delete, write_through
from library.cache.store.codec import decode, encode
from library.cache.store.generations import (
    generation_bump,
    generation_get,
    generation_key,
    generations_bump,
)
from library.cache.store.local import LOCAL_MAX_ENTRIES, LocalTier, local_tier
from library.cache.store.revalidate import refreshes_wait, stale_while_revalidate
from library.cache.store.switch import CACHE_SWITCH_VARIABLE as CACHE_SWITCH_VARIABLE
from library.cache.store.switch import cache_enabled

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
