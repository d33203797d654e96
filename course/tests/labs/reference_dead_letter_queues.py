"""An independent re-implementation of the dead-letter-queues lab.

None of this imports ``course/labs``: a message's count follows from how many attempts
it needs.
"""

from __future__ import annotations

from collections import Counter

from course.tests.labs.reference import Row


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
