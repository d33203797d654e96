"""The in-process tier: a small, bounded map of hot keys kept in this process."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from library.cache.metrics import metrics_record

LOCAL_MAX_ENTRIES: Final = 512


class LocalTier:
    """A small in-process map of key -> stored bytes, each with its own expiry.

    For hot keys only: it saves the network round trip, but another process's write
    or delete cannot reach it, so its lifetime (a few seconds) is how stale a hot
    value may get. Bytes, not objects, are kept: every caller decodes its own copy
    and cannot change what the next caller sees. Least recently used entries go
    first when the bound is reached.

    ``clock`` (seconds, monotonic) dates the entries; a test passes its own to
    step across an expiry exactly instead of sleeping past it.
    """

    def __init__(
        self,
        max_entries: int = LOCAL_MAX_ENTRIES,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, *, namespace: str) -> bytes | None:
        """Return the live bytes of ``key``, or None; an expired entry is dropped."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= self.clock():
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
            self._entries[key] = (self.clock() + lifetime_s, data)
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
