"""Lifetimes and placement of cache entries: pure functions, no I/O, no settings.

Everything here is derived from the key itself, never from a random number: the same
key gets the same lifetime deviation, the same shard and the same copy on every
instance, so a behaviour seen once can be reproduced (and the course's labs compute
the same figures as the running system).

The digest is the course's: the first 8 hex digits of the key's SHA-256 read as a
number, i.e. its first 32 bits.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "MAX_LIFETIME_S",
    "hot_copy_key",
    "key_digest",
    "lifetime_capped",
    "lifetime_with_jitter",
    "shard_of",
]

# Every entry has an upper lifetime, whatever a caller asks for: an entry whose
# invalidation event was lost is then wrong for at most a day, not forever.
MAX_LIFETIME_S = 24 * 60 * 60


def key_digest(key: str) -> int:
    """Return the first 32 bits of SHA-256(key) as an integer."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16)


def lifetime_capped(lifetime_s: float) -> float:
    """Return ``lifetime_s`` capped at ``MAX_LIFETIME_S``; refuse a non-positive one."""
    if lifetime_s <= 0:
        raise ValueError(f"a lifetime must be positive, got {lifetime_s!r}")
    return min(lifetime_s, MAX_LIFETIME_S)


def lifetime_with_jitter(key: str, lifetime_s: int, jitter_s: int) -> int:
    """Return ``lifetime_s`` plus a key-derived deviation in ``[0, jitter_s)``.

    Entries loaded in the same instant (a restart, a generation bump) would all expire
    in the same instant with a fixed lifetime and hit the origin together; the
    deviation spreads those expiries over ``jitter_s`` seconds. ``jitter_s == 0``
    returns the lifetime unchanged. The result never exceeds ``MAX_LIFETIME_S``.
    """
    if lifetime_s <= 0:
        raise ValueError(f"a lifetime must be positive, got {lifetime_s!r}")
    if jitter_s < 0:
        raise ValueError(f"jitter cannot be negative, got {jitter_s!r}")
    deviation = key_digest(key) % jitter_s if jitter_s else 0
    return min(lifetime_s + deviation, MAX_LIFETIME_S)


def shard_of(key: str, shards: int) -> int:
    """Return the shard (``0 .. shards-1``) a key lands on in a digest-routed store."""
    if shards < 1:
        raise ValueError(f"there must be at least one shard, got {shards!r}")
    return key_digest(key) % shards


def hot_copy_key(key: str, copies: int, request_index: int) -> str:
    """Return the copy of a hot key that request number ``request_index`` should use.

    A single very popular key loads one shard no matter how many shards there are;
    writing it under ``copies`` names (``key.0`` .. ``key.N-1``) lets their digests
    send the load to different shards. Every copy must be written and invalidated, so
    keep ``copies`` small and put a generation in the key, which retires all copies
    at once.
    """
    if copies < 1:
        raise ValueError(f"there must be at least one copy, got {copies!r}")
    return f"{key}.{request_index % copies}"
