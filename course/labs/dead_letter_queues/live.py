"""The live part of the dead-letter-queues lab: the real outbox, dead letters and
redrive on real worker processes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from course.instruments.probes import fixed_marker
from course.labs.dead_letter_queues.params import DeadLetterQueuesParams
from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LivePart,
    Progress,
    Tables,
    table,
)
from messaging.models import DeadLetter
from messaging.registry import SUBSCRIPTIONS
from messaging.services import dead_letter_redrive

# --- live part ---------------------------------------------------------------------

LIVE_MAX_MESSAGES = 500


@dataclass(frozen=True)
class Phase:
    """The probes after one drain: done, dead letters still open, claims counted."""

    processed: int
    dead_letters: int
    attempts: int


@dataclass(frozen=True)
class Letter:
    seq: int
    message_type: str
    attempts: int
    subscription: str
    body: dict[str, Any]
    last_error: str


@dataclass(frozen=True)
class Measurement:
    system_threshold: int  # the subscription's max_attempts: what really isolates
    first: Phase
    letters: list[Letter]  # the dead letters of the first drain, by probe
    redriven: int
    after: Phase  # the redriven probes after the second drain


def live_check(params: DeadLetterQueuesParams) -> str | None:
    """Refuse an empty outbox and more messages than real processes take in time."""
    if params.messages == 0:
        return (
            "messages: 0 (an empty outbox) runs in the model only; the live part "
            "needs at least 1 message to deliver"
        )
    if params.messages > LIVE_MAX_MESSAGES:
        return (
            f"live: at most {LIVE_MAX_MESSAGES} messages on real processes, "
            f"got {params.messages}"
        )
    return None


def measure(params: DeadLetterQueuesParams, progress: Progress) -> Measurement:
    """Drain real probes until settled, fix the cause, redrive, drain again.

    The isolation threshold is the ``lab_probe`` subscription's ``max_attempts``;
    the ``threshold`` parameter drives only the model.
    """
    messages = params.messages
    permanent = {n for n in params.permanent if n <= messages}
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

    with harness.live_system(run=run, progress=progress) as system:
        harness.live_step(progress, 0.1, f"{messages} probes, failing: {permanent}")
        ids = harness.publish_probes(run, range(1, messages + 1), fail=permanent)
        settle("the first drain")
        letters = list(
            DeadLetter.objects.filter(
                delivery__in=harness.probe_deliveries(ids.values())
            ).select_related("delivery")
        )
        first = Phase(
            processed(),
            sum(1 for letter in letters if letter.is_open),
            harness.attempts_total(ids.values()),
        )
        found = [
            Letter(
                int(letter.body["seq"]),
                letter.message_type,
                letter.attempts,
                letter.subscription,
                letter.body,
                letter.last_error,
            )
            for letter in letters
        ]
        harness.live_step(progress, 0.5, "the cause is fixed; redrive")
        fixed_marker(run).touch()
        redriven = dead_letter_redrive(ids=[x.pk for x in letters], user=None)
        redriven_ids = [x.delivery.message_id for x in letters]
        settle("the drain after the redrive")
        open_letters = DeadLetter.objects.filter(
            delivery__in=harness.probe_deliveries(ids.values()),
            redriven_at__isnull=True,
        ).count()
        after = Phase(processed(), open_letters, harness.attempts_total(redriven_ids))
    return Measurement(
        system_threshold=SUBSCRIPTIONS[harness.PROBE_SUBSCRIPTION].max_attempts,
        first=first,
        letters=found,
        redriven=redriven,
        after=after,
    )


def tables(params: DeadLetterQueuesParams, measured: Measurement) -> Tables:
    """The two drains, and the dead letters as the admin shows them."""
    suffix = ""
    if params.threshold != measured.system_threshold:
        suffix = f" (system threshold {measured.system_threshold}, not the parameter)"
    first, after = measured.first, measured.after
    rows: list[list[Cell]] = [
        [f"first drain{suffix}", first.processed, first.dead_letters, first.attempts],
        [
            f"after redriving {measured.redriven}",
            after.processed,
            after.dead_letters,
            after.attempts,
        ],
    ]
    letter_rows: list[list[Cell]] = [
        [
            letter.seq,
            letter.message_type,
            letter.attempts,
            letter.subscription,
            json.dumps(letter.body, separators=(",", ":"), sort_keys=True),
            letter.last_error,
        ]
        for letter in sorted(measured.letters, key=lambda x: x.seq)
    ]
    return {
        "live_redrive": table(["phase", "processed", "dead_letters", "attempts"], rows),
        "live_dead_letters": table(
            ["message", "type", "attempt", "source", "body", "last_error"],
            letter_rows,
        ),
    }


LIVE = LivePart(check=live_check, measure=measure, tables=tables)
