"""An independent re-implementation of the hot-key lab, shaped differently on purpose.

Nothing here imports ``course/labs``: the stampede is an explicit event queue (a heap
of timed callbacks) instead of coroutines on an event loop, and the digest reads the
raw SHA-256 bytes instead of parsing hex text.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

from course.tests.labs.reference import to_fixed_1

STOCK_KEY = "library:s1:g1:tbranch-1:stock"


def sha32(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


class EventQueue:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (when, next(self._order), action))

    def run(self) -> None:
        while self._heap:
            self.now, _, action = heapq.heappop(self._heap)
            action()


def stampede(strategy: str, requests: int, delay: int) -> dict[str, float]:
    """All readers arrive at t=0 (queued first); each origin answer lands at t+delay."""
    q = EventQueue()
    stats = {"origin": 0, "pending": 0, "stale": 0, "last_answer": 0.0}
    state: dict[str, Any] = {"stored": False, "flight": False, "waiters": 0}

    def answered() -> None:
        stats["last_answer"] = max(stats["last_answer"], q.now)

    def origin(then: Callable[[], None]) -> None:
        stats["origin"] += 1
        q.at(q.now + delay, then)

    def arrive() -> None:
        if strategy == "plain":
            if state["stored"]:
                answered()
                return
            stats["pending"] += 1

            def landed() -> None:
                state["stored"] = True
                answered()

            origin(landed)
        elif strategy == "single-flight":
            if state["stored"]:
                answered()
                return
            stats["pending"] += 1
            state["waiters"] += 1
            if not state["flight"]:
                state["flight"] = True

                def flight_landed() -> None:
                    state["stored"] = True
                    state["flight"] = False
                    state["waiters"] = 0
                    answered()

                origin(flight_landed)
        else:  # stale-while-revalidate: an expired value is there from the start
            if not state["stored"] and not state["flight"]:
                state["flight"] = True

                def refreshed() -> None:
                    state["stored"] = True
                    state["flight"] = False

                origin(refreshed)
            if not state["stored"]:
                stats["stale"] += 1
            answered()

    for _ in range(requests):
        q.at(0.0, arrive)
    q.run()
    return stats


def hot_key(
    requests: int,
    origin_delay_ms: int,
    keys: int,
    lifetime: int,
    jitter: int,
    shard_requests: int,
    shards: int,
    copies: list[int],
) -> dict[str, list[list[Any]]]:
    out: dict[str, list[list[Any]]] = {"stampede": [], "duration": []}
    for name in ("plain", "single-flight", "stale-while-revalidate"):
        s = stampede(name, requests, origin_delay_ms)
        out["stampede"].append([name, s["origin"], s["pending"], s["stale"]])
        out["duration"].append([name, s["last_answer"]])

    names = [f"library:s1:g1:tbranch-1:book:{n}" for n in range(1, keys + 1)]
    fixed = Counter(lifetime for _ in names)
    spread = Counter(lifetime + (sha32(k) % jitter if jitter > 0 else 0) for k in names)
    out["expiry"] = [
        ["fixed lifetime", len(fixed), max(fixed.values())],
        ["jittered lifetime", len(spread), max(spread.values())],
    ]

    stream = []
    for i in range(shard_requests):
        if i % 10 >= 6:
            stream.append((False, f"library:s1:g1:tbranch-{2 + i % 3}:book:{i % 40}"))
        else:
            stream.append((True, STOCK_KEY))
    rows = []
    for n in [0, *copies]:
        load = [0] * shards
        for i, (hot, key) in enumerate(stream):
            load[sha32(f"{key}.{i % n}" if hot and n else key) % shards] += 1
        label = (
            "single key" if n == 0 else f"split into {n} cop{'y' if n == 1 else 'ies'}"
        )
        rows.append([label, to_fixed_1(max(load) / shard_requests * 100), *load])
    out["shards"] = rows
    return out
