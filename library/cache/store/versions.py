"""Version records: a row's current version kept in Redis, so a hit needs no database.

A page whose key names its row's version (a book page) would otherwise ask the
database for that version on every request, which costs as much as the rest of a
hit together. A version record is that answer, kept beside the pages: written by
the change's own commit hook (and by its event's subscriber, which retries), read
by the page tier before it looks the page up.

The record only ever moves forward. ``version_advance`` writes a value only when
its version is higher than the stored one (compared in Redis, in one script), so a
reader that missed, read version 1 from the database and writes it back late can
never replace the 2 a commit hook wrote meanwhile. A missing record (never written,
expired, evicted, lost with a Redis restart) is read from the database again; the
lifetime bounds how long any record missed by every writer can stay behind.
"""

from __future__ import annotations

from typing import Final, cast

from library.cache.metrics import cache_redis

# Compare and set in one step: two writers racing each other cannot interleave a
# read and a write. The stored value starts with the version, then ":" and the
# payload (see ``version_value``).
_ADVANCE: Final = """
local stored = redis.call('GET', KEYS[1])
if stored then
  local version = tonumber(string.match(stored, '^(%d+)'))
  if version and version >= tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""

# Delete a record older than the announced version: the next reader loads the
# current one from the database. Used where only the version is known (an event).
RETIRE_BELOW: Final = """
local stored = redis.call('GET', KEYS[1])
if not stored then return 0 end
local version = tonumber(string.match(stored, '^(%d+)'))
if version and version >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


def version_value(version: int, payload: str) -> str:
    """Return the stored form of a record: the version, then the payload."""
    return f"{version}:{payload}"


def version_parse(raw: object) -> tuple[int, str] | None:
    """Return (version, payload) of a stored record; None if absent or damaged."""
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    version, sep, payload = text.partition(":")
    if not sep or not version.isdigit():
        return None
    return int(version), payload


def version_advance(key: str, version: int, payload: str, *, lifetime_s: int) -> bool:
    """Store ``version`` (with ``payload``) unless the record holds a higher or equal
    one; return whether it was stored. Redis errors propagate: the caller decides
    whether a lost write is retried (a subscriber) or only logged (a commit hook).
    """
    stored = cache_redis().eval(
        _ADVANCE,
        1,
        key,
        version,
        version_value(version, payload),
        lifetime_s * 1000,
    )
    return bool(cast(int, stored))
