"""The live part of the dead-letter-queues lab: the real outbox, dead letters and
redrive on real worker processes.
"""

from __future__ import annotations

import json

from course.instruments.probes import fixed_marker
from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LabError,
    Params,
    Progress,
    Tables,
    int_list_param,
    int_param,
    table,
)
from messaging.models import DeadLetter
from messaging.registry import SUBSCRIPTIONS
from messaging.services import deadletter_redrive

# --- live part ---------------------------------------------------------------------

LIVE_MAX_MESSAGES = 500


def live(params: Params, progress: Progress) -> Tables:
    """Drain real probes until settled, fix the cause, redrive, drain again.

    The isolation threshold is the ``lab_probe`` subscription's ``max_attempts``;
    the ``threshold`` parameter drives only the model.
    """

    messages = int_param(params, "messages")
    if messages == 0:
        raise LabError(
            "messages: 0 (an empty outbox) runs in the model only; the live part "
            "needs at least 1 message to deliver"
        )
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
