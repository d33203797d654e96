"""An independent re-implementation of the delivery-semantics lab.

None of this imports ``course/labs``: where the lab runs SQLite tables and loops over
rounds, this reasons per message, each a small state machine.
"""

from __future__ import annotations

from enum import Enum

from course.tests.labs.reference import Row


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
