"""Lab for "Dead-Letter Queues": isolating the messages that will never succeed.

Model part:

1. ``retry`` — ``messages`` overdue notifications, of which the ids in ``permanent``
   fail on every attempt. Each round hands every pending message out once and
   raises its attempt counter before the work. Three settings, as the course runs
   them: no threshold for 8 rounds, no threshold for 24 rounds, and ``threshold``
   attempts for 8 rounds; a message failing its ``threshold``-th attempt moves to
   the dead-letter table.
2. ``selection`` — the same number of messages, each needing a fixed number of
   attempts: never for the permanent ids, 5 for multiples of 5, 3 for other
   multiples of 3, 1 for the rest. For each of ``thresholds``: how much work is
   done, how many attempts fail, and how many messages end up isolated wrongly (they
   would have succeeded later) or rightly (they never would).

Extra tables: ``retry_settings`` (the retry rows under distinct labels, for the
chart), ``selection_workload`` (how many messages need how many attempts),
``dead_letters`` (the records a ``threshold``-round drain leaves, with
everything a redrive needs) and ``redrive`` (the same drain, the cause fixed, the
records sent back with reset counters and drained again).

The queue and the dead-letter records live in an in-memory SQLite database; a record
keeps the body, type, attempt count, last error and source queue. Ids in
``permanent`` above ``messages`` name no message and change nothing, as in the
course, which only looks the set up for existing messages.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    LabError,
    Param,
    Params,
    Progress,
    Tables,
    int_list_param,
    int_param,
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


def model(params: Params, progress: Progress) -> Tables:
    messages = int_param(params, "messages")
    permanent = set(int_list_param(params, "permanent"))
    threshold = int_param(params, "threshold")
    progress(0.05, "retry: unbounded retry against a threshold")
    retry = retry_rows(messages, permanent, threshold)
    progress(0.45, "dead letters: records, then redrive after the fix")
    records, redriven = redrive(messages, permanent, threshold)
    progress(0.7, "selection: wasted attempts against wrongful isolation")
    selection = [
        selection_row(messages, permanent, t)
        for t in int_list_param(params, "thresholds")
    ]
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


# --- live part ---------------------------------------------------------------------

LIVE_MAX_MESSAGES = 500


def live(params: Params, progress: Progress) -> Tables:
    """Drain real probes until settled, fix the cause, redrive, drain again.

    The isolation threshold is the ``lab_probe`` subscription's ``max_attempts``;
    the ``threshold`` parameter drives only the model.
    """
    import json

    from course.labs import live as harness
    from messaging.models import DeadLetter
    from messaging.probes import fixed_marker
    from messaging.registry import SUBSCRIPTIONS
    from messaging.services import deadletter_redrive

    messages = int_param(params, "messages")
    if messages > LIVE_MAX_MESSAGES:
        raise LabError(
            f"live: at most {LIVE_MAX_MESSAGES} messages on real processes, "
            f"got {messages}"
        )
    permanent = {n for n in int_list_param(params, "permanent") if n <= messages}
    system_threshold = SUBSCRIPTIONS[harness.PROBE_SUBSCRIPTION].max_attempts
    suffix = ""
    if int_param(params, "threshold") != system_threshold:
        suffix = f" (system threshold {system_threshold}, not the parameter)"
    run = harness.new_run_id()

    def settle(what: str) -> None:
        harness.wait_until(
            lambda: harness.deliveries_settled(ids.values()),
            what=what,
            timeout=30 + messages / 10,
            system=system,
        )

    def processed() -> int:
        return int(harness.probe_deliveries(ids.values()).filter(status="done").count())

    rows: list[list[Cell]] = []
    with harness.live_system(run=run, progress=progress) as system:
        harness.live_step(progress, 0.1, f"{messages} probes, failing: {permanent}")
        ids = harness.publish_probes(run, range(1, messages + 1), fail=permanent)
        settle("the first drain")
        letters = list(
            DeadLetter.objects.filter(
                delivery__in=harness.probe_deliveries(ids.values())
            ).select_related("delivery")
        )
        rows.append(
            [
                f"first drain{suffix}",
                processed(),
                sum(1 for letter in letters if letter.is_open),
                harness.attempts_total(ids.values()),
            ]
        )
        letter_rows: list[list[Cell]] = [
            [
                int(letter.body["seq"]),
                letter.message_type,
                letter.attempts,
                letter.subscription,
                json.dumps(letter.body, separators=(",", ":"), sort_keys=True),
                letter.last_error,
            ]
            for letter in sorted(letters, key=lambda x: int(x.body["seq"]))
        ]
        harness.live_step(progress, 0.5, "the cause is fixed; redrive")
        fixed_marker(run).touch()
        redriven = deadletter_redrive(ids=[x.pk for x in letters], user=None)
        redriven_ids = [x.delivery.message_id for x in letters]
        settle("the drain after the redrive")
        open_letters = DeadLetter.objects.filter(
            delivery__in=harness.probe_deliveries(ids.values()),
            redriven_at__isnull=True,
        ).count()
        rows.append(
            [
                f"after redriving {redriven}",
                processed(),
                open_letters,
                harness.attempts_total(redriven_ids),
            ]
        )
    return {
        "live_redrive": table(["phase", "processed", "dead_letters", "attempts"], rows),
        "live_dead_letters": table(
            ["message", "type", "attempt", "source", "body", "last_error"],
            letter_rows,
        ),
    }


LAB = Lab(
    slug="dead-letter-queues",
    title="Dead-Letter Queues",
    params=(
        Param("messages", "int", 20, "overdue notifications", minimum=1, maximum=5000),
        Param(
            "permanent",
            "int_list",
            [7, 13],
            "message ids that fail on every attempt",
            minimum=1,
            maximum=5000,
            max_items=50,
        ),
        Param(
            "threshold",
            "int",
            3,
            "attempts before a message is isolated (third retry row, redrive)",
            minimum=1,
            maximum=100,
        ),
        Param(
            "thresholds",
            "int_list",
            [1, 2, 3, 5, 8],
            "threshold values compared in the selection table",
            minimum=1,
            maximum=100,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="retry_settings",
            label="setting",
            values=("wasted", "remaining_depth", "dead_letters"),
            title="Wasted attempts and what is left after each setting",
            unit="messages",
        ),
        Chart(
            table="selection",
            label="threshold",
            values=("wasted_attempts", "wrongly_isolated"),
            title="Threshold: wasted attempts against wrongful isolation",
            unit="messages",
        ),
    ),
)
