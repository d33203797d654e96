"""The model part of the dead-letter-queues lab: a SQLite job queue with attempt
counters, retries, isolation of dead messages and redrive.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from course.labs.dead_letter_queues.params import DeadLetterQueuesParams
from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)

MESSAGE_TYPE = "overdue_notification"
SOURCE_QUEUE = "job_queue"
SHORT_ROUNDS = 8
LONG_ROUNDS = 24

# queued: messages with their attempt counter and state (pending, processed, dead);
# dead: what an isolated message keeps so it can be examined and sent back.
_SCHEMA = """
CREATE TABLE queued (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT 'pending'
);
CREATE TABLE dead (
    id INTEGER PRIMARY KEY,
    message INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    tries INTEGER NOT NULL,
    error TEXT NOT NULL,
    origin TEXT NOT NULL
);
"""


class _MemberMissing(Exception):
    """The failure a permanently broken message produces on every attempt."""


@dataclass
class RetryCounts:
    delivered: int = 0
    succeeded: int = 0
    wasted: int = 0
    remaining_depth: int = 0
    dead_letters: int = 0


class _JobQueue:
    """The lesson's job queue and dead-letter queue, and one consumer working them."""

    def __init__(self, messages: int, broken: set[int]) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.executescript(_SCHEMA)
        self.broken = set(broken)
        self.db.executemany(
            "INSERT INTO queued (id, kind, payload) VALUES (?, ?, ?)",
            (
                (n, MESSAGE_TYPE, json.dumps({"loanId": n}, separators=(",", ":")))
                for n in range(1, messages + 1)
            ),
        )

    def close(self) -> None:
        self.db.close()

    def _work(self, message_id: int) -> None:
        if message_id in self.broken:
            raise _MemberMissing(f"member not found (loan {message_id})")

    def round(self, threshold: int, counts: RetryCounts) -> None:
        """Hand every pending message out once; ``threshold`` 0 never isolates."""
        pending = self.db.execute(
            "SELECT id, kind, payload, tries FROM queued WHERE state = ? ORDER BY id",
            ("pending",),
        ).fetchall()
        for message_id, kind, body, previous in pending:
            counts.delivered += 1
            attempt = previous + 1
            # Counted before the work, so a failure that skips the handler still counts.
            self.db.execute(
                "UPDATE queued SET tries = ? WHERE id = ?", (attempt, message_id)
            )
            try:
                self._work(message_id)
            except _MemberMissing as error:
                counts.wasted += 1
                if threshold > 0 and attempt >= threshold:
                    self._isolate(message_id, kind, body, attempt, str(error))
                continue
            self._set_state(message_id, "processed")
            counts.succeeded += 1

    def _isolate(
        self, message_id: int, kind: str, body: str, attempt: int, error: str
    ) -> None:
        self.db.execute(
            "INSERT INTO dead (message, kind, payload, tries, error, origin) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (message_id, kind, body, attempt, error, SOURCE_QUEUE),
        )
        self._set_state(message_id, "dead")

    def _set_state(self, message_id: int, state: str) -> None:
        self.db.execute("UPDATE queued SET state = ? WHERE id = ?", (state, message_id))

    def redrive(self) -> int:
        """Send every dead letter back with a fresh counter; return how many."""
        query = "SELECT id, message FROM dead ORDER BY message"
        records = self.db.execute(query).fetchall()
        for record_id, message_id in records:
            # Without the reset the first new failure would isolate it again.
            self.db.execute(
                "UPDATE queued SET tries = 0, state = ? WHERE id = ?",
                ("pending", message_id),
            )
            self.db.execute("DELETE FROM dead WHERE id = ?", (record_id,))
        return len(records)

    def count(self, state: str) -> int:
        (n,) = self.db.execute(
            "SELECT count(*) FROM queued WHERE state = ?", (state,)
        ).fetchone()
        return int(n)

    def dead_letter_count(self) -> int:
        (n,) = self.db.execute("SELECT count(*) FROM dead").fetchone()
        return int(n)

    def dead_letter_rows(self) -> list[list[Cell]]:
        return [
            list(row)
            for row in self.db.execute(
                "SELECT message, kind, tries, origin, payload, error "
                "FROM dead ORDER BY message"
            )
        ]


def run_retry(
    messages: int, permanent: set[int], *, threshold: int, rounds: int
) -> RetryCounts:
    """Run ``rounds`` rounds; ``threshold`` 0 means retry without limit."""
    queue = _JobQueue(messages, permanent)
    try:
        counts = RetryCounts()
        for _ in range(rounds):
            queue.round(threshold, counts)
        counts.remaining_depth = queue.count("pending")
        counts.dead_letters = queue.dead_letter_count()
    finally:
        queue.close()
    return counts


def retry_rows(messages: int, permanent: set[int], threshold: int) -> list[list[Cell]]:
    settings = (
        ("unbounded", 0, SHORT_ROUNDS),
        ("unbounded", 0, LONG_ROUNDS),
        (f"threshold={threshold}", threshold, SHORT_ROUNDS),
    )
    rows: list[list[Cell]] = []
    for label, limit, rounds in settings:
        c = run_retry(messages, permanent, threshold=limit, rounds=rounds)
        rows.append(
            [
                label,
                rounds,
                c.delivered,
                c.succeeded,
                c.wasted,
                c.remaining_depth,
                c.dead_letters,
            ]
        )
    return rows


def redrive(
    messages: int, permanent: set[int], threshold: int
) -> tuple[list[list[Cell]], list[list[Cell]]]:
    """Drain with ``threshold``, fix the cause, redrive, drain again.

    Return (dead-letter records after the first drain, one summary row).
    """
    queue = _JobQueue(messages, permanent)
    try:
        first = RetryCounts()
        for _ in range(threshold):  # a drain gives every message threshold chances
            queue.round(threshold, first)
        pending_after_first = queue.count("pending")
        records = queue.dead_letter_rows()
        queue.broken.clear()  # the missing member records were completed
        redriven = queue.redrive()
        second = RetryCounts()
        for _ in range(threshold):
            queue.round(threshold, second)
        summary: list[Cell] = [
            first.succeeded,
            pending_after_first,
            redriven,
            second.succeeded,
            queue.count("processed"),
            queue.count("pending"),
            queue.dead_letter_count(),
        ]
    finally:
        queue.close()
    return records, [summary]


def attempts_needed(message_id: int, permanent: set[int]) -> int:
    """Return the attempt on which a message succeeds, 0 for never."""
    if message_id in permanent:
        return 0
    if message_id % 5 == 0:
        return 5
    if message_id % 3 == 0:
        return 3
    return 1


def selection_row(messages: int, permanent: set[int], threshold: int) -> list[Cell]:
    processed = wasted = wrongly = rightly = 0
    for message_id in range(1, messages + 1):
        needed = attempts_needed(message_id, permanent)
        for attempt in range(1, threshold + 1):
            if needed and attempt >= needed:
                processed += 1
                break
            wasted += 1
            if attempt == threshold:  # out of attempts: to the dead-letter queue
                if needed:
                    wrongly += 1
                else:
                    rightly += 1
    return [threshold, processed, wasted, wrongly, rightly]


def workload_row(messages: int, permanent: set[int]) -> list[Cell]:
    needed = [attempts_needed(n, permanent) for n in range(1, messages + 1)]
    return [messages, needed.count(0), needed.count(3), needed.count(5)]


def model(params: DeadLetterQueuesParams, progress: Progress) -> Tables:
    messages = params.messages
    permanent = set(params.permanent)
    threshold = params.threshold
    progress(0.05, "retry: unbounded retry against a threshold")
    retry = retry_rows(messages, permanent, threshold)
    progress(0.45, "dead letters: records, then redrive after the fix")
    records, redriven = redrive(messages, permanent, threshold)
    progress(0.7, "selection: wasted attempts against wrongful isolation")
    selection = [selection_row(messages, permanent, t) for t in params.thresholds]
    return {
        "retry": table(
            [
                "mode",
                "rounds",
                "delivered",
                "succeeded",
                "wasted",
                "remaining_depth",
                "dead_letters",
            ],
            retry,
        ),
        "selection": table(
            [
                "threshold",
                "processed",
                "wasted_attempts",
                "wrongly_isolated",
                "permanently_isolated",
            ],
            selection,
        ),
        "dead_letters": table(
            ["message", "type", "attempt", "source", "body", "last_error"], records
        ),
        "redrive": table(
            [
                "first_pass_processed",
                "pending_after_first_pass",
                "redriven",
                "second_pass_processed",
                "processed",
                "pending",
                "dead_letters",
            ],
            redriven,
        ),
        # The retry rows share the label "unbounded"; this names each setting fully
        # so the chart's categories can be told apart.
        "retry_settings": table(
            ["setting", "wasted", "remaining_depth", "dead_letters"],
            [[f"{row[0]}, {row[1]} rounds", *row[4:]] for row in retry],
        ),
        "selection_workload": table(
            ["messages", "permanently_broken", "clears_on_3", "clears_on_5"],
            [workload_row(messages, permanent)],
        ),
    }
