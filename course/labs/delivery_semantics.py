"""Lab for "Delivery Semantics": the order of acknowledgement and effect decides.

Model part, two measurements:

1. ``modes`` — ``messages`` overdue notifications sit in an outbox. On the first pass
   the process dies half-way through the first attempt of every message listed in
   ``crashes``; a second pass (the restarted process) takes whatever is still
   pending. Three arrangements run the same workload:

   - ``at-most-once``: acknowledge, then send;
   - ``at-least-once``: send, then acknowledge;
   - ``deduplication``: send and record the message id in a guard table in one
     transaction, then acknowledge; a message already recorded is not sent again.

   The tables live in an in-memory SQLite database in autocommit mode, so a "death"
   rolls back exactly what an open transaction held, as in the lesson.
2. ``external`` — one message whose effect is a call to an outside service, which no
   database transaction can cover. The process dies between the two steps on the
   first pass. Fixed, as the course prints it.

A crash listed for a message id that does not exist never happens, as in the course,
where the crash set is only consulted for the messages being processed.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from rq import Retry

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

if TYPE_CHECKING:
    from course.labs.live import LiveSystem

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


def model(params: Params, progress: Progress) -> Tables:
    messages = int_param(params, "messages")
    crashes = set(int_list_param(params, "crashes"))
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


# --- live part ---------------------------------------------------------------------

# The live part runs one real message at a time through the spine; keep it short.
LIVE_MAX_MESSAGES = 200
LIVE_MODE_COLUMNS = ["mode", "delivered", "effect", "lost", "repeated"]


def _live_rq_mode(
    system: LiveSystem, mode: str, run: str, messages: int, crashes: set[int]
) -> Counts:
    """One rq job per message on the run's private queue; wait until all settle."""
    from course.labs import live as harness
    from course.labs.live_jobs import probe_at_least_once, probe_at_most_once
    from messaging.probes import crash_token

    job_ids = []
    for seq in range(1, messages + 1):
        if mode == "at-most-once":
            job = system.enqueue(
                probe_at_most_once, run, seq, seq in crashes, job_id=f"amo-{seq}"
            )
        else:
            if seq in crashes:
                crash_token(run, seq).touch()
            job = system.enqueue(
                probe_at_least_once,
                run,
                seq,
                job_id=f"alo-{seq}",
                retry=Retry(max=3),
            )
        job_ids.append(job.id)
    harness.wait_until(
        lambda: harness.rq_jobs_settled(system, job_ids),
        what=f"the {mode} rq jobs",
        timeout=30 + 2 * messages,
        system=system,
        detail=lambda: f"{harness.deliveries_counted(run, mode)} deliveries counted",
    )
    delivered = harness.deliveries_counted(run, mode)
    effects = harness.effect_counts(run)
    return Counts(
        delivered,
        effects.effect,
        messages - effects.distinct,
        effects.effect - effects.distinct,
    )


def _live_spine(
    system: LiveSystem, run: str, messages: int, crashes: set[int], progress: Progress
) -> Counts:
    """Publish through the outbox, one message at a time; count claims and effects.

    The next message is published once the previous one has been claimed: a drain
    claims fresh deliveries in batches, and a worker dying on one message would
    otherwise take its batch-mates' attempts with it (they count as deliveries).
    """
    from course.labs import live as harness

    ids: dict[int, int] = {}
    for seq in range(1, messages + 1):
        ids.update(harness.publish_probes(run, [seq], crash_once={seq} & crashes))
        message_id = ids[seq]
        harness.wait_until(
            partial(harness.delivery_reached, message_id, attempts=1),
            what=f"the first claim of probe {seq}",
            timeout=30,
            system=system,
        )
        if seq % 4 == 0:
            harness.live_step(
                progress, 0.7 + 0.2 * seq / messages, f"deduplication: {seq} published"
            )
    harness.wait_until(
        lambda: harness.deliveries_settled(ids.values()),
        what="the deduplication deliveries",
        timeout=30 + 4 * len(crashes),
        system=system,
    )
    effects = harness.effect_counts(run)
    return Counts(
        harness.attempts_total(ids.values()),
        effects.effect,
        messages - effects.distinct,
        effects.effect - effects.distinct,
    )


def live(params: Params, progress: Progress) -> Tables:
    """Ask real processes: rq by default, rq with Retry, and the outbox spine.

    Every crash hits the first attempt of a message listed in ``crashes``: the
    work-horse SIGKILLs itself (before the effect at most once, after the committed
    effect at least once, inside the effect's transaction with the spine).
    """
    from course.labs import live as harness

    messages = int_param(params, "messages")
    if messages > LIVE_MAX_MESSAGES:
        raise LabError(
            f"live: at most {LIVE_MAX_MESSAGES} messages on real processes, "
            f"got {messages}"
        )
    crashes = {n for n in int_list_param(params, "crashes") if n <= messages}
    run = harness.new_run_id()
    rows: list[list[Cell]] = []
    with harness.live_system(run=run, progress=progress, private_queue=True) as system:
        for index, mode in enumerate(("at-most-once", "at-least-once")):
            harness.live_step(progress, 0.1 + 0.3 * index, f"{mode}: rq jobs")
            counts = _live_rq_mode(system, mode, f"{run}-{mode[:8]}", messages, crashes)
            rows.append(counts.row(mode))
        harness.live_step(progress, 0.7, "deduplication: the outbox and its guard")
        counts = _live_spine(system, f"{run}-dedup", messages, crashes, progress)
        rows.append(counts.row("deduplication"))
    return {"live_modes": table(LIVE_MODE_COLUMNS, rows)}


LAB = Lab(
    slug="delivery-semantics",
    title="Delivery Semantics",
    params=(
        Param(
            "messages",
            "int",
            12,
            "overdue notifications in the outbox",
            minimum=1,
            maximum=5000,
        ),
        Param(
            "crashes",
            "int_list",
            [3, 7, 11],
            "message ids whose first attempt dies half-way",
            minimum=1,
            maximum=5000,
            max_items=50,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="modes",
            label="mode",
            values=("lost", "repeated"),
            title="Lost and repeated notifications per mode",
            unit="messages",
        ),
        Chart(
            table="modes",
            label="mode",
            values=("delivered", "effect"),
            title="Deliveries against notifications actually sent",
            unit="messages",
        ),
    ),
)
