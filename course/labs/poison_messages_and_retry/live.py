"""The live part of the poison-messages lab, on real worker processes."""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.poison_messages_and_retry.model import LETHAL, POISON_QUEUE
from course.labs.poison_messages_and_retry.params import PoisonMessagesParams
from messaging.models import DeadLetter
from messaging.models import Delivery as DeliveryRow

# --- live part ---------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One probe's delivery as it settled, and its dead letter's error if any."""

    seq: int
    claims: int
    status: str
    dead_letter_error: str | None


@dataclass(frozen=True)
class Measurement:
    probes: list[Probe]  # in queue order


def measure(params: PoisonMessagesParams, progress: Progress) -> Measurement:
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
            letter.delivery.message_id: letter.last_error
            for letter in DeadLetter.objects.filter(
                delivery__in=list(deliveries.values())
            ).select_related("delivery")
        }
    probes = []
    for seq in POISON_QUEUE:
        row = deliveries[ids[seq]]
        probes.append(
            Probe(seq, row.attempts, str(row.status), letters.get(row.message_id))
        )
    return Measurement(probes)


def tables(params: PoisonMessagesParams, measured: Measurement) -> Tables:
    """Where the counter sits (deaths, processed, dead letters), and each claim."""
    deaths = 0
    claim_rows: list[list[Cell]] = []
    for probe in measured.probes:
        error = probe.dead_letter_error
        if error is not None and "worker died" in error:
            # Every claim but the last ran the handler and lost its process.
            deaths += probe.claims - 1
        outcome = probe.status if error is None else f"dead letter: {error}"
        claim_rows.append([probe.seq, probe.claims, outcome])
    processed = sum(
        1 for probe in measured.probes if probe.status == DeliveryRow.Status.DONE
    )
    letters = sum(1 for probe in measured.probes if probe.dead_letter_error is not None)
    return {
        "live_counter_position": table(
            ["position", "deaths", "processed", "dead_letters"],
            [["at claim (live system)", deaths, processed, letters]],
        ),
        "live_claims": table(["message", "claims", "outcome"], claim_rows),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
