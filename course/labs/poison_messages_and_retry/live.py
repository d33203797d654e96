"""The live part of the poison-messages lab, on real worker processes."""

from __future__ import annotations

from course.labs.harness import live as harness
from course.labs.harness.base import Cell, Params, Progress, Tables, table
from course.labs.poison_messages_and_retry.model import LETHAL, POISON_QUEUE
from messaging.models import DeadLetter
from messaging.models import Delivery as DeliveryRow

# --- live part ---------------------------------------------------------------------


def live(params: Params, progress: Progress) -> Tables:
    """Five real probes, #3 kills every work-horse that runs it; count the claims.

    The spine raises the attempt counter when it claims a delivery, before the work,
    so #3's count grows although its worker never records a failure. With the
    system's ``max_attempts`` of 3, a delivery whose earlier attempts killed their
    worker is isolated when its claim reaches the threshold: the handler runs on
    claims 1 and 2 (each one a death) and claim 3 sends it to the dead letters
    without running it, as in the course.
    """

    run = harness.new_run_id()
    with harness.live_system(run=run, progress=progress) as system:
        harness.live_step(progress, 0.1, "five probes, #3 kills its worker")
        ids = harness.publish_probes(run, POISON_QUEUE, crash_always=LETHAL)
        harness.wait_until(
            lambda: harness.deliveries_settled(ids.values()),
            what="the poison probes",
            timeout=60,
            system=system,
            detail=lambda: f"{harness.attempts_total(ids.values())} claims so far",
        )
        deliveries = {
            row.message_id: row for row in harness.probe_deliveries(ids.values())
        }
        letters = {
            letter.delivery.message_id: letter
            for letter in DeadLetter.objects.filter(
                delivery__in=list(deliveries.values())
            ).select_related("delivery")
        }
    deaths = 0
    claim_rows: list[list[Cell]] = []
    for seq in POISON_QUEUE:
        row = deliveries[ids[seq]]
        letter = letters.get(row.message_id)
        if letter is not None and "worker died" in letter.last_error:
            # Every claim but the last ran the handler and lost its process.
            deaths += row.attempts - 1
        outcome = row.status
        if letter is not None:
            outcome = f"dead letter: {letter.last_error}"
        claim_rows.append([seq, row.attempts, outcome])
    processed = sum(
        1 for row in deliveries.values() if row.status == DeliveryRow.Status.DONE
    )
    return {
        "live_counter_position": table(
            ["position", "deaths", "processed", "dead_letters"],
            [["at claim (live system)", deaths, processed, len(letters)]],
        ),
        "live_claims": table(["message", "claims", "outcome"], claim_rows),
    }
