"""An independent re-implementation of the backpressure model.

None of this imports ``course/labs``: it is computed per job from event instants (when
is each job produced, when does each consumer tick happen) instead of a
per-millisecond accumulator loop with a deque.
"""

from __future__ import annotations


def backpressure(
    policy: str, *, window: int, produce: int, consume: int, capacity: int
) -> list[object]:
    waiting: list[tuple[int, int]] = []  # (produced at, seq) in arrival order
    head = 0  # index of the oldest job still waiting in ``waiting``
    produced_total = dropped = blocked_ms = delivered = 0
    longest = peak = 0
    p_credit = c_credit = 0
    seq = 0
    for now in range(1, window + 1):
        p_credit += produce
        while p_credit >= 1000:
            size = len(waiting) - head
            if policy == "block" and size >= capacity:
                blocked_ms += 1
                break
            p_credit -= 1000
            produced_total += 1
            if policy in ("unbounded",) or size < capacity:
                waiting.append((now, seq))
            elif policy == "tail-drop":
                dropped += 1
            else:  # head-drop
                head += 1
                dropped += 1
                waiting.append((now, seq))
            seq += 1
        c_credit += consume
        while c_credit >= 1000 and len(waiting) > head:
            c_credit -= 1000
            born, _ = waiting[head]
            head += 1
            delivered += 1
            longest = max(longest, now - born)
        peak = max(peak, len(waiting) - head)
    return [
        policy,
        produced_total,
        delivered,
        dropped,
        len(waiting) - head,
        peak,
        longest,
        blocked_ms,
    ]


def stream_signals(
    *, listening: bool, chunk: int = 1024, count: int = 64, mark: int = 16384
) -> list[int]:
    per_cycle = -(-mark // chunk)  # writes until writableLength reaches the mark
    if listening:
        return [count // per_cycle, min(count, per_cycle) * chunk]
    return [max(0, count - per_cycle + 1), count * chunk]
