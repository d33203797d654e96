"""The model part of the delivery-semantics lab: the three modes (see ``MODES``)
on a SQLite outbox, and the order of an external effect.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from course.labs.delivery_semantics.params import DeliverySemanticsParams
from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)

MODES = ("at-most-once", "at-least-once", "deduplication")
PASSES = (1, 2)
HANDLED_ON = (
    "2025-07-20"  # 1: the pass on which the listed messages crash; 2: after restart
)

# outbox_rows: the messages and their acknowledgement; sent: one row per
# notification actually sent (the effect); handled: the deduplication guard.
_SCHEMA = """
CREATE TABLE outbox_rows (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending'
);
CREATE TABLE sent (id INTEGER PRIMARY KEY, message INTEGER NOT NULL,
                   member INTEGER NOT NULL);
CREATE TABLE handled (message INTEGER PRIMARY KEY, handled_on TEXT NOT NULL);
"""


class _ProcessDied(Exception):
    """Stands for the consumer process dying between two steps."""


@dataclass(frozen=True)
class Counts:
    delivered: int
    effect: int
    lost: int
    repeated: int

    def row(self, label: str) -> list[Cell]:
        return [label, self.delivered, self.effect, self.lost, self.repeated]


class _Outbox:
    """The lesson's three tables and the operations a consumer performs on them."""

    def __init__(self, messages: int) -> None:
        # isolation_level=None: no implicit transactions; only an explicit BEGIN
        # groups statements, which is the boundary the deduplication mode relies on.
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.executescript(_SCHEMA)
        self.messages = messages
        self.db.executemany(
            "INSERT INTO outbox_rows (id, kind, payload) VALUES (?, ?, ?)",
            (
                (n, "overdue_notification", json.dumps({"memberId": n % 3 + 1}))
                for n in range(1, messages + 1)
            ),
        )

    def close(self) -> None:
        self.db.close()

    def pending(self) -> list[tuple[int, str]]:
        # Read all at once: the pass works on the list it saw when it started.
        return list(
            self.db.execute(
                "SELECT id, payload FROM outbox_rows WHERE state = ? ORDER BY id",
                ("pending",),
            )
        )

    def send(self, message_id: int, body: str) -> None:
        member_id = json.loads(body)["memberId"]
        self.db.execute(
            "INSERT INTO sent (message, member) VALUES (?, ?)",
            (message_id, member_id),
        )

    def acknowledge(self, message_id: int) -> None:
        self.db.execute(
            "UPDATE outbox_rows SET state = ? WHERE id = ?", ("processed", message_id)
        )

    def send_once(self, message_id: int, body: str) -> None:
        """Send unless already recorded; the effect and its guard commit together."""
        self.db.execute("BEGIN IMMEDIATE")
        seen = self.db.execute(
            "SELECT 1 FROM handled WHERE message = ?", (message_id,)
        ).fetchone()
        if seen is None:
            self.send(message_id, body)
            self.db.execute(
                "INSERT INTO handled (message, handled_on) VALUES (?, ?)",
                (message_id, HANDLED_ON),
            )
        self.db.execute("COMMIT")

    def count(self, sql: str) -> int:
        return int(self.db.execute(sql).fetchone()[0])


def _handle(box: _Outbox, mode: str, message_id: int, body: str, crash: bool) -> None:
    """Process one delivery in ``mode``; raise _ProcessDied between the two steps."""
    if mode == "at-most-once":
        box.acknowledge(message_id)
        if crash:
            raise _ProcessDied
        box.send(message_id, body)
    elif mode == "at-least-once":
        box.send(message_id, body)
        if crash:
            raise _ProcessDied
        box.acknowledge(message_id)
    else:
        box.send_once(message_id, body)
        if crash:
            raise _ProcessDied
        box.acknowledge(message_id)


def run_mode(mode: str, messages: int, crashes: set[int]) -> Counts:
    """Run the workload in one mode and count deliveries, effects, losses, repeats."""
    box = _Outbox(messages)
    try:
        delivered = 0
        for pass_number in PASSES:
            for message_id, body in box.pending():
                delivered += 1
                crash = pass_number == 1 and message_id in crashes
                try:
                    _handle(box, mode, message_id, body, crash)
                except _ProcessDied:
                    # Whatever the dead process had not committed is gone.
                    if box.db.in_transaction:
                        box.db.execute("ROLLBACK")
        effect = box.count("SELECT count(*) FROM sent")
        distinct = box.count("SELECT count(DISTINCT message) FROM sent")
    finally:
        box.close()
    return Counts(delivered, effect, messages - distinct, effect - distinct)


# --- the external effect -------------------------------------------------------------

EXTERNAL_ORDERS: tuple[tuple[str, bool, bool], ...] = (
    # (label, effect before acknowledgement, receiver keeps idempotency keys)
    ("effect first, ack after", True, False),
    ("ack first, effect after", False, False),
    ("effect first + dedup at receiver", True, True),
)


class _NotificationService:
    """The outside service: what it sent, and the keys it has seen if it keeps them."""

    def __init__(self, *, deduplicates: bool) -> None:
        self.deduplicates = deduplicates
        self.sent: list[str] = []
        self.seen: set[str] = set()

    def call(self, key: str) -> None:
        if self.deduplicates:
            if key in self.seen:
                return  # a key seen before: answer, but do not send twice
            self.seen.add(key)
        self.sent.append(key)


def run_external(*, effect_first: bool, deduplicates: bool) -> Counts:
    """Run one message through two passes; the first dies between the two steps."""
    service = _NotificationService(deduplicates=deduplicates)
    key = "message=1"
    acknowledged = False  # the database side of the message
    calls = 0
    for pass_number in PASSES:
        if acknowledged:
            continue  # nothing pending any more
        if effect_first:
            calls += 1
            service.call(key)
        else:
            acknowledged = True
        if pass_number == 1:
            continue  # the process dies here; the restarted one tries again
        if effect_first:
            acknowledged = True
        else:
            calls += 1
            service.call(key)
    effect = len(service.sent)
    return Counts(calls, effect, 1 if effect == 0 else 0, max(0, effect - 1))


def model(params: DeliverySemanticsParams, progress: Progress) -> Tables:
    messages = params.messages
    crashes = set(params.crashes)
    mode_rows: list[list[Cell]] = []
    for i, mode in enumerate(MODES):
        progress(0.05 + 0.25 * i, f"modes: {mode}")
        mode_rows.append(run_mode(mode, messages, crashes).row(mode))
    progress(0.8, "external: the effect sits outside the database")
    external_rows = [
        run_external(effect_first=first, deduplicates=dedup).row(label)
        for label, first, dedup in EXTERNAL_ORDERS
    ]
    return {
        "modes": table(["mode", "delivered", "effect", "lost", "repeated"], mode_rows),
        "external": table(
            ["order", "calls", "effect", "lost", "repeated"], external_rows
        ),
    }
