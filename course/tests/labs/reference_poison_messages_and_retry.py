"""An independent re-implementation of the poison-messages-and-retry lab.

None of this imports ``course/labs``: retry waves are event lists counted with
``Counter`` and integer division; rounding goes through Fractions.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from fractions import Fraction
from itertools import accumulate

from course.tests.labs.reference import Generator, Row


def counter_position() -> list[Row]:
    """Five messages, #3 kills the process, threshold 3, at most 12 process starts."""
    rows: list[Row] = []
    for label, count_before_work in (("on catch", False), ("at delivery", True)):
        state = dict.fromkeys(range(1, 6), "pending")
        tries = dict.fromkeys(range(1, 6), 0)
        starts = delivered = deaths = 0
        while starts < 12 and "pending" in state.values():
            starts += 1
            batch = deque(m for m, s in state.items() if s == "pending")
            while batch:
                message = batch.popleft()
                delivered += 1
                if count_before_work:
                    tries[message] += 1
                    if tries[message] >= 3:
                        state[message] = "dead"
                        continue
                if message == 3:
                    deaths += 1
                    break  # the rest of this batch dies with the process
                state[message] = "processed"
        tally = Counter(state.values())
        rows.append(
            [
                label,
                starts,
                delivered,
                deaths,
                tally["processed"],
                tally["dead"],
                tally["pending"],
            ]
        )
    return rows


def backoff_schedule(base_ms: int, cap_ms: int) -> list[Row]:
    columns = [
        [0] * 8,
        [2000] * 8,
        [base_ms << k for k in range(8)],
        [min(cap_ms, base_ms << k) for k in range(8)],
    ]
    rows: list[Row] = [[n + 1, *(c[n] for c in columns)] for n in range(8)]
    rows.append(["total", *(sum(c) for c in columns)])
    return rows


def _fit(waits: list[int], budget_ms: int) -> Row:
    """Count the leading waits whose running total stays within the budget."""
    elapsed = attempts = 0
    for total in accumulate(waits):
        if total > budget_ms:
            break
        attempts, elapsed = attempts + 1, total
    return ["unlimited" if attempts == 1000 else attempts, elapsed]


def backoff_budget(base_ms: int, cap_ms: int, budget_ms: int) -> list[Row]:
    rows: list[Row] = [["immediate", "unlimited", 0]]
    fits = min(1000, budget_ms // 2000)
    rows.append(["fixed 2 s", "unlimited" if fits == 1000 else fits, 2000 * fits])
    # Doubling: after k attempts the waits sum to base * (2**k - 1).
    if base_ms == 0:
        rows.append(["exponential", "unlimited", 0])
    else:
        k = 0
        while k < 1000 and base_ms * (2 ** (k + 1) - 1) <= budget_ms:
            k += 1
        rows.append(["exponential", k, base_ms * (2**k - 1)])
    capped = [min(cap_ms, base_ms << min(n, 80)) for n in range(1000)]
    rows.append(["exponential + cap", *_fit(capped, budget_ms)])
    return rows


def _half_up(x: float) -> int:
    return math.floor(Fraction(x) + Fraction(1, 2))


def retry_wave(
    *,
    base_ms: int,
    cap_ms: int,
    consumers: int,
    attempts: int,
    bucket_ms: int,
    seed: int,
) -> list[Row]:
    rows: list[Row] = []
    base_waits = [min(cap_ms, base_ms << min(n, 80)) for n in range(attempts)]
    for mode in ("no jitter", "full jitter", "decorrelated jitter"):
        gen = Generator(seed)
        events: list[int] = []  # retry moments, ms after the shared failure
        for _ in range(consumers):
            clock, last = 0, base_ms
            for wait in base_waits:
                if mode == "full jitter":
                    wait = _half_up(gen.next() * wait)
                elif mode == "decorrelated jitter":
                    last = min(
                        cap_ms, _half_up(base_ms + gen.next() * (last * 3 - base_ms))
                    )
                    wait = last
                clock += wait
                events.append(clock)
        per_slot = Counter(moment // bucket_ms for moment in events)
        rows.append(
            [mode, len(events), max(per_slot.values()), len(per_slot), max(per_slot)]
        )
    return rows
