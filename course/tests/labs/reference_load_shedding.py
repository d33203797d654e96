"""An independent re-implementation of the load-shedding model.

None of this imports ``course/labs``: it reasons per request about which wave of
``max_concurrent`` it belongs to.
"""

from __future__ import annotations

import heapq
from collections import Counter


def shedding(
    mode: str, *, requests: int, max_concurrent: int, max_queue: int, job_ms: int
) -> list[list[object]]:
    capacity = requests if mode == "unbounded" else max_concurrent + max_queue
    lines: Counter[tuple[int, int]] = Counter()
    ends: list[int] = []
    for index in range(requests):
        if index >= capacity:
            lines[(503, 0)] += 1
            continue
        end = job_ms if len(ends) < max_concurrent else heapq.heappop(ends) + job_ms
        heapq.heappush(ends, end)
        lines[(200, end // 100)] += 1
    ordered = sorted(lines, key=lambda k: (str(k[0]), f"{k[1]:2d}"))
    return [
        [mode, status, slices, lines[(status, slices)]] for status, slices in ordered
    ]
