"""Independent re-implementations of four messaging labs, shaped differently on purpose.

None of this imports ``course/labs``. Where the labs run SQLite tables and loops over
rounds, these reason per message: each message is a small state machine, or its
count follows from how many attempts it needs. Rounding goes through Fractions
(the exact value of a double, ties away from zero), the generator comes from
``reference.Generator`` (exact integers plus one rounding), and retry waves are
event lists counted with ``Counter`` and integer division.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from enum import Enum
from fractions import Fraction
from itertools import accumulate

from course.tests.reference import Generator

Row = list[object]


def fixed(value: float | Fraction, digits: int) -> float:
    """Number(value.toFixed(digits)) for non-negative values, ties away from zero."""
    exact = Fraction(value)
    assert exact >= 0
    scale = 10**digits
    return float(Fraction(math.floor(exact * scale + Fraction(1, 2)), scale))


def whole(x: float) -> object:
    return int(x) if float(x).is_integer() else x


# --- rationale-for-asynchronous-processing ------------------------------------------

COSTS = [3, 9, 140, 260, 55]
NEEDED_FOR_RESPONSE = [True, True, False, False, False]
NAMES = [
    "authorization check",
    "writing the loan record",
    "overdue notification",
    "branch stock summary recalculation",
    "monthly report line",
]


def rationale(success_probability: float) -> dict[str, list[Row]]:
    running = list(accumulate(COSTS))
    steps: list[Row] = [
        [name, ms, "required" if need else "deferrable", acc]
        for name, ms, need, acc in zip(
            NAMES, COSTS, NEEDED_FOR_RESPONSE, running, strict=True
        )
    ]
    total = running[-1]
    kept = [ms for ms, need in zip(COSTS, NEEDED_FOR_RESPONSE, strict=True) if need]
    required = sum(kept)
    p = Fraction(success_probability)
    # The exact power: the double result of p**n is within one ulp of it, which
    # only matters on a five-decimal tie.
    summary: Row = [
        total,
        required,
        fixed(1 - Fraction(required, total), 3),
        fixed(Fraction(1000, total), 1),
        fixed(Fraction(1000, required), 1),
        fixed(p ** len(COSTS), 5),
        fixed(p ** len(kept), 5),
    ]
    # A volatile list dies with the process; a row committed with the loan does not.
    loans, jobs_per_loan = 3, 3
    durable_after_restart = {"in memory": 0, "outbox": loans * jobs_per_loan}
    durability: list[Row] = [
        [handoff, loans, jobs] for handoff, jobs in durable_after_restart.items()
    ]
    return {
        "steps": steps,
        "summary": [[whole(x) if isinstance(x, float) else x for x in summary]],
        "durability": durability,
    }


# --- delivery-semantics -------------------------------------------------------------


class State(Enum):
    PENDING = "pending"
    ACKED = "acknowledged"


def delivery_modes(messages: int, crashes: list[int]) -> list[Row]:
    """Follow each message through both passes as its own little state machine."""
    rows: list[Row] = []
    for mode in ("at-most-once", "at-least-once", "deduplication"):
        deliveries = 0
        sends_per_message: list[int] = []
        for message in range(1, messages + 1):
            state, sends, guarded = State.PENDING, 0, False
            for first_pass in (True, False):
                if state is State.ACKED:
                    break
                deliveries += 1
                dies = first_pass and message in crashes
                if mode == "at-most-once":
                    state = State.ACKED
                    if not dies:
                        sends += 1
                elif mode == "at-least-once":
                    sends += 1
                    if not dies:
                        state = State.ACKED
                else:
                    if not guarded:  # send and guard commit as one
                        sends, guarded = sends + 1, True
                    if not dies:
                        state = State.ACKED
            sends_per_message.append(sends)
        effect = sum(sends_per_message)
        distinct = sum(1 for s in sends_per_message if s > 0)
        rows.append([mode, deliveries, effect, messages - distinct, effect - distinct])
    return rows


def delivery_external() -> list[Row]:
    """Replay the external-effect run as steps on two systems that share nothing."""
    rows: list[Row] = []
    for label, order, receiver_keeps_keys in (
        ("effect first, ack after", ("call", "ack"), False),
        ("ack first, effect after", ("ack", "call"), False),
        ("effect first + dedup at receiver", ("call", "ack"), True),
    ):
        acked, calls, sent = False, 0, 0
        keys: set[str] = set()
        # The first pass gets through one step before the process dies.
        for steps_done in (1, len(order)):
            if acked:
                continue
            for step in order[:steps_done]:
                if step == "ack":
                    acked = True
                    continue
                calls += 1
                if receiver_keeps_keys and "message=1" in keys:
                    continue
                keys.add("message=1")
                sent += 1
        rows.append([label, calls, sent, int(sent == 0), max(sent - 1, 0)])
    return rows


# --- dead-letter-queues -------------------------------------------------------------


def _tries_until_done(broken: bool, threshold: int, rounds: int) -> tuple[int, str]:
    """Return (deliveries, final state) of one message over ``rounds`` rounds."""
    if not broken:
        return 1, "processed"
    if threshold and threshold <= rounds:
        return threshold, "dead"
    return rounds, "pending"


def dead_letter_retry(messages: int, permanent: list[int], threshold: int) -> list[Row]:
    broken = {m for m in permanent if 1 <= m <= messages}
    rows: list[Row] = []
    for label, limit, rounds in (
        ("unbounded", 0, 8),
        ("unbounded", 0, 24),
        (f"threshold={threshold}", threshold, 8),
    ):
        outcomes = [
            _tries_until_done(m in broken, limit, rounds)
            for m in range(1, messages + 1)
        ]
        states = Counter(state for _, state in outcomes)
        delivered = sum(n for n, _ in outcomes)
        succeeded = states["processed"]
        rows.append(
            [
                label,
                rounds,
                delivered,
                succeeded,
                delivered - succeeded,
                states["pending"],
                states["dead"],
            ]
        )
    return rows


def _needed(m: int, broken: set[int]) -> int | None:
    if m in broken:
        return None
    for divisor, attempts in ((5, 5), (3, 3)):
        if m % divisor == 0:
            return attempts
    return 1


def dead_letter_selection(
    messages: int, permanent: list[int], thresholds: list[int]
) -> list[Row]:
    broken = set(permanent)
    needs = [_needed(m, broken) for m in range(1, messages + 1)]
    rows: list[Row] = []
    for t in thresholds:
        succeeds = [n for n in needs if n is not None and n <= t]
        isolated = [n for n in needs if n is None or n > t]
        wasted = sum(n - 1 for n in succeeds) + t * len(isolated)
        wrongly = sum(1 for n in isolated if n is not None)
        rows.append([t, len(succeeds), wasted, wrongly, len(isolated) - wrongly])
    return rows


def dead_letter_redrive(
    messages: int, permanent: list[int], threshold: int
) -> tuple[list[Row], Row]:
    """Return (records a threshold-round drain leaves, the redrive summary)."""
    broken = sorted({m for m in permanent if 1 <= m <= messages})
    records: list[Row] = [
        [
            m,
            "overdue_notification",
            threshold,
            "job_queue",
            '{"loanId":' + str(m) + "}",
            f"member not found (loan {m})",
        ]
        for m in broken
    ]
    n = len(broken)
    return records, [messages - n, 0, n, n, messages, 0, 0]


# --- poison-messages-and-retry ------------------------------------------------------


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
