"""The drain: relay, claim and process a lane until nothing is due."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from django.utils import timezone

from messaging.models import Delivery, OutboxMessage
from messaging.registry import STREAM_CONSUMERS
from messaging.services.claim import deliveries_claim, due, lane_subscriptions
from messaging.services.partitions import partition_work, partitions_drain
from messaging.services.process import Outcome, deliveries_process
from messaging.services.publish import relay_pending
from messaging.services.streams import streams_advance, streams_behind


@dataclass
class DrainReport:
    relayed: int = 0
    done: int = 0
    duplicates: int = 0
    retried: int = 0
    dead: int = 0
    lost_leases: int = 0
    streamed: int = 0
    claimed: int = 0
    passes: int = 0
    # Whether the last pass may have left due work behind (a full claim, or one
    # that took a delivery tried before): the drainer passes again at once.
    full_batch: bool = False
    # The lanes the relay wrote deliveries for (a drainer wakes the others' drains).
    lanes_relayed: set[str] = field(default_factory=set)

    def add(self, outcome: Outcome) -> None:
        field = {
            "done": "done",
            "duplicate": "duplicates",
            "retry": "retried",
            "dead": "dead",
            "lost_lease": "lost_leases",
        }[outcome.result]
        setattr(self, field, getattr(self, field) + 1)


# Deliveries claimed per pass. Every pass pays a fixed set of statements (relay,
# claim, the partitions' heads, the stream consumers) whatever it finds, so under a
# backlog a bigger batch spreads them thinner; one group commit still covers it.
CLAIM_BATCH = 100


def messaging_drain(
    *,
    owner: str,
    batch: int = CLAIM_BATCH,
    budget_seconds: float = 10.0,
    lane: str = "main",
) -> DrainReport:
    """Relay and process ``lane`` until nothing is due or the time budget is spent.

    Passes (``drain_pass``) until one finds nothing to do. The budget keeps one rq
    job from holding a worker forever; the caller re-nudges when work remains.
    """
    report = DrainReport()
    started = timezone.now()
    deadline = started + datetime.timedelta(seconds=budget_seconds)
    while timezone.now() < deadline:
        if not drain_pass(
            report, owner=owner, batch=batch, lane=lane, deadline=deadline
        ):
            break
    return report


def drain_pass(
    report: DrainReport,
    *,
    owner: str,
    batch: int,
    lane: str,
    deadline: datetime.datetime,
    streams: bool = True,
) -> bool:
    """One step of a drain; add what it did to ``report``; return whether it did any.

    Relay new messages, claim a batch, process it, give each partition with work a
    turn, and (main lane, with ``streams``) move the stream consumers on.
    """
    report.passes += 1
    report.relayed += relay_pending(lanes=report.lanes_relayed)
    claimed = deliveries_claim(owner=owner, limit=batch, lane=lane)
    report.claimed += len(claimed)
    # A claim takes at most one delivery tried before: more may be waiting.
    full = len(claimed) >= batch or any(d.attempts > 1 for d in claimed)
    for outcome in deliveries_process(claimed, owner=owner):
        report.add(outcome)
    ordered = partitions_drain(owner=owner, lane=lane, deadline=deadline)
    for outcome in ordered:
        report.add(outcome)
    moved = streams_advance() if lane == "main" and streams else 0
    report.streamed += moved
    # A consumer that read a whole batch (a replay, say) has more to read.
    report.full_batch = full or moved >= min(
        (c.batch for c in STREAM_CONSUMERS.values()), default=moved + 1
    )
    return bool(claimed or ordered or moved)


def work_remaining(now: datetime.datetime | None = None, *, lane: str = "main") -> bool:
    """Return whether anything is waiting for a drain of ``lane`` right now."""
    now = now or timezone.now()
    names = lane_subscriptions(lane)
    return (
        OutboxMessage.objects.filter(relayed_at__isnull=True).exists()
        or Delivery.objects.filter(
            due(now), partition__isnull=True, subscription__in=names
        ).exists()
        or partition_work(now, lane=lane)
        or (lane == "main" and streams_behind())
    )
