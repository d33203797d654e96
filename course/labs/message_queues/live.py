"""The live part of the message-queues lab: real probes through the outbox on real
worker processes, one of which dies holding its lease.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from functools import partial

from config.processes import process_gone
from course.labs.harness import live as harness
from course.labs.harness.base import (
    Cell,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.message_queues.params import MessageQueuesParams
from messaging.models import Delivery as DeliveryRow
from messaging.registry import SUBSCRIPTIONS

# --- live part ---------------------------------------------------------------------

LIVE_MESSAGES = 3
LIVE_CRASHES_ON = 2  # the second probe's first worker dies holding its lease


def _worker_label(owner: str) -> str:
    """Name the process that held a lease ("host:pid:nonce" → "work-horse pid")."""
    parts = owner.split(":")
    return f"work-horse {parts[1]}" if len(parts) == 3 else owner or "?"


def _owner_gone(owner: str) -> bool:
    """Return whether the lease owner's process has exited (True if not local)."""

    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's worker: its lease expiring is the evidence
    return process_gone(int(pid))


@dataclass(frozen=True)
class Claim:
    """A probe's delivery as one worker left it: who held it, which attempt, how."""

    seq: int
    lease_owner: str
    attempts: int
    outcome: str


@dataclass(frozen=True)
class Measurement:
    claims: list[Claim]
    deliveries: int  # claims counted on all the probes
    lease_s: float | None  # the lab_probe subscription's lease
    redelivered_after_s: float


def measure(params: MessageQueuesParams, progress: Progress) -> Measurement:
    """Three probes through the real spine; the second one's first worker dies.

    Each probe is published after the previous one was claimed, in the course's
    order, so no claim batch holds two of them. The dead worker's lease is the
    ``lab_probe`` subscription's two seconds, not the ``visibility`` parameter.
    """

    def delivery(message_id: int) -> DeliveryRow:
        row: DeliveryRow = harness.probe_deliveries([message_id]).get()
        return row

    def redelivered_or_gone(message_id: int, owner: str) -> bool:
        return _owner_gone(owner) or harness.delivery_reached(message_id, attempts=2)

    run = harness.new_run_id()
    claims: list[Claim] = []
    ids: dict[int, int] = {}
    with harness.live_system(run=run, progress=progress) as system:
        for seq in range(1, LIVE_MESSAGES + 1):
            harness.live_step(progress, 0.1 + 0.2 * seq, f"probe {seq} published")
            crash = {seq} if seq == LIVE_CRASHES_ON else set()
            ids.update(harness.publish_probes(run, [seq], crash_once=crash))
            message_id = ids[seq]
            if not crash:
                harness.wait_until(
                    partial(harness.delivery_reached, message_id, done=True),
                    what=f"probe {seq}",
                    timeout=30,
                    system=system,
                )
                row = delivery(message_id)
                claims.append(Claim(seq, row.lease_owner, row.attempts, "acknowledged"))
                continue
            harness.wait_until(
                partial(harness.delivery_reached, message_id, attempts=1),
                what=f"the first claim of probe {seq}",
                timeout=30,
                system=system,
            )
            first_claim = time.monotonic()
            held = delivery(message_id)
            harness.wait_until(
                partial(redelivered_or_gone, message_id, held.lease_owner),
                what=f"the death of probe {seq}'s worker",
                timeout=30,
                system=system,
            )
            claims.append(
                Claim(seq, held.lease_owner, held.attempts, "died holding the lease")
            )
        harness.live_step(progress, 0.8, "waiting for the lease to run out")
        crashed = ids[LIVE_CRASHES_ON]
        harness.wait_until(
            partial(harness.delivery_reached, crashed, attempts=2),
            what=f"the redelivery of probe {LIVE_CRASHES_ON}",
            timeout=30,
            system=system,
        )
        redelivered_after = time.monotonic() - first_claim
        harness.wait_until(
            lambda: harness.deliveries_settled(ids.values()),
            what="the probes",
            timeout=30,
            system=system,
        )
        again = delivery(crashed)
        claims.append(
            Claim(
                LIVE_CRASHES_ON,
                again.lease_owner,
                again.attempts,
                "acknowledged after the lease ran out",
            )
        )
        deliveries = harness.attempts_total(ids.values())
    lease = SUBSCRIPTIONS[harness.PROBE_SUBSCRIPTION].visibility
    return Measurement(
        claims=claims,
        deliveries=deliveries,
        lease_s=lease.total_seconds() if lease is not None else None,
        redelivered_after_s=redelivered_after,
    )


def tables(params: MessageQueuesParams, measured: Measurement) -> Tables:
    """Each claim with the worker that held it; the deliveries and the lease."""
    rows: list[list[Cell]] = [
        [claim.seq, _worker_label(claim.lease_owner), claim.attempts, claim.outcome]
        for claim in measured.claims
    ]
    return {
        "live_unacknowledged": table(["message", "worker", "attempt", "outcome"], rows),
        "live_deliveries": table(
            ["messages", "deliveries", "lease_s", "redelivered_after_s"],
            [
                [
                    LIVE_MESSAGES,
                    measured.deliveries,
                    measured.lease_s,
                    round(measured.redelivered_after_s, 1),
                ]
            ],
        ),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
