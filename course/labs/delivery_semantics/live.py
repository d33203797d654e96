"""The live part of the delivery-semantics lab: one real message at a time through rq
and the messaging spine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from rq import Retry

from course.instruments.probes import crash_token
from course.labs.delivery_semantics.model import Counts
from course.labs.delivery_semantics.params import DeliverySemanticsParams
from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LivePart,
    Progress,
    Tables,
    table,
)
from course.labs.harness.live_jobs import probe_at_least_once, probe_at_most_once

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem

# --- live part ---------------------------------------------------------------------

# The live part runs one real message at a time through the spine; keep it short.
LIVE_MAX_MESSAGES = 200
LIVE_MODE_COLUMNS = ["mode", "delivered", "effect", "lost", "repeated"]


@dataclass(frozen=True)
class Delivered:
    """One mode's run: the deliveries counted and the effects the probes left."""

    mode: str
    delivered: int
    effects: harness.EffectCounts


@dataclass(frozen=True)
class Measurement:
    messages: int
    modes: list[Delivered]


def _live_rq_mode(
    system: LiveSystem, mode: str, run: str, messages: int, crashes: set[int]
) -> Delivered:
    """One rq job per message on the run's private queue; wait until all settle."""

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
    return Delivered(mode, delivered, harness.effect_counts(run))


def _live_spine(
    system: LiveSystem, run: str, messages: int, crashes: set[int], progress: Progress
) -> Delivered:
    """Publish through the outbox, one message at a time; count claims and effects.

    The next message is published once the previous one has been claimed: a drain
    claims fresh deliveries in batches, and a worker dying on one message would
    otherwise take its batch-mates' attempts with it (they count as deliveries).
    """

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
    attempts = harness.attempts_total(ids.values())
    return Delivered("deduplication", attempts, harness.effect_counts(run))


def live_check(params: DeliverySemanticsParams) -> str | None:
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


def measure(params: DeliverySemanticsParams, progress: Progress) -> Measurement:
    """Ask real processes: rq by default, rq with Retry, and the outbox spine.

    Every crash hits the first attempt of a message listed in ``crashes``: the
    work-horse SIGKILLs itself (before the effect at most once, after the committed
    effect at least once, inside the effect's transaction with the spine).
    """

    messages = params.messages
    crashes = {n for n in params.crashes if n <= messages}
    run = harness.new_run_id()
    modes: list[Delivered] = []
    with harness.live_system(run=run, progress=progress, private_queue=True) as system:
        for index, mode in enumerate(("at-most-once", "at-least-once")):
            harness.live_step(progress, 0.1 + 0.3 * index, f"{mode}: rq jobs")
            modes.append(
                _live_rq_mode(system, mode, f"{run}-{mode[:8]}", messages, crashes)
            )
        harness.live_step(progress, 0.7, "deduplication: the outbox and its guard")
        modes.append(_live_spine(system, f"{run}-dedup", messages, crashes, progress))
    return Measurement(messages, modes)


def tables(params: DeliverySemanticsParams, measured: Measurement) -> Tables:
    """One row per mode: a message lost has no effect, one repeated has several."""
    rows: list[list[Cell]] = []
    for found in measured.modes:
        effects = found.effects
        counts = Counts(
            found.delivered,
            effects.effect,
            measured.messages - effects.distinct,
            effects.effect - effects.distinct,
        )
        rows.append(counts.row(found.mode))
    return {"live_modes": table(LIVE_MODE_COLUMNS, rows)}


LIVE = LivePart(check=live_check, measure=measure, tables=tables)
