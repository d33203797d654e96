"""An independent re-implementation of the message-queues model's tables.

It shares no code with ``course/labs``: queue depth uses its closed recurrence
instead of a queue.
"""

from __future__ import annotations


def queue_depths(consumers: int, rounds: int, production: int, rate: int) -> str:
    depth, out = 0, []
    for _ in range(rounds):
        depth = max(0, depth + production - consumers * rate)
        out.append(depth)
    return " ".join(map(str, out))


def unacknowledged_rows(visibility: float) -> list[list[object]]:
    v: object = int(visibility) if float(visibility).is_integer() else visibility
    return [
        [0, "consumer-1", 1, 1, "acknowledged"],
        [0, "consumer-1", 2, 1, "left unacknowledged"],
        [0, "consumer-1", 3, 1, "acknowledged"],
        [v, "consumer-2", 2, 2, "acknowledged"],
    ]
