"""The typed registry of message types and the subscriptions that consume them.

Adding a message type means adding it here and to at least one subscription's
``accepts``; the check at the bottom refuses to import otherwise, so an event can never
be published into the void.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypedDict

from django.core.exceptions import ImproperlyConfigured

from messaging.policies import Backoff


class MessageType(StrEnum):
    LOAN_ISSUED = "loan_issued"
    RETURN_RECEIVED = "return_received"
    STOCK_CORRECTED = "stock_corrected"
    # Published only by the course's live labs: a measurable effect with crash points.
    LAB_PROBE = "lab_probe"


class LoanBody(TypedDict):
    loan_id: int
    book_id: int
    member_id: int
    branch_id: int
    on_shelf: int
    book_version: int


class StockBody(TypedDict):
    book_id: int
    branch_id: int
    on_shelf: int
    book_version: int


@dataclass(frozen=True)
class Subscription:
    name: str
    accepts: frozenset[MessageType]
    # Dotted path of ``handler(message) -> None``; runs in the guard's transaction.
    handler: str
    max_attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    # The lease (visibility timeout): a claimed delivery not finished by then is
    # claimed again by another worker. None: settings.MESSAGING_LEASE_SECONDS.
    visibility: datetime.timedelta | None = None
    # Dotted path of ``flush() -> None``, run after every batch that held deliveries
    # of this subscription, outside any transaction: it sends, in one go, the network
    # effects the handler queued after its commits (one round trip per batch, not
    # one per message).
    after_batch: str | None = None
    # > 0: the deliveries are split by a hash of the message key into this many
    # partitions, each processed in offset order by one worker at a time
    # (messaging.partitions). For effects whose correctness depends on per-key order.
    partitions: int = 0
    # The drain lane. Each lane is drained by rq jobs of its own, so a subscription
    # known to be slow, given a lane of its own, never holds up the others' batches.
    lane: str = "main"
    # False: declared in code but takes no copies until started (admin or lab).
    starts_active: bool = True
    # Dotted path of ``work(message) -> None`` run BEFORE the effect's transaction:
    # slow work (a network call) that must not hold the database meanwhile (on
    # SQLite a transaction holds the only write lock, so a slow handler inside it
    # would stall every other subscription and the relay). It is not guarded by
    # the dedup row, so it may run again on a retry: it must tolerate repeats.
    outside: str | None = None


@dataclass(frozen=True)
class StreamSpec:
    """A named reader of the outbox log (one copy, an offset per consumer).

    ``handler(message)`` runs in the transaction that also moves the offset, so the
    projection and the offset never disagree. ``reset()`` empties the projection
    before a rebuild from the start of the log.
    """

    name: str
    accepts: frozenset[MessageType]
    handler: str
    reset: str
    batch: int = 200


# Lanes drained with several jobs at once (a backlog spreads over every worker); any
# other lane runs one drain at a time, so a slow lane holds at most one worker.
PARALLEL_LANES = frozenset({"main"})


LIBRARY_TYPES = frozenset(
    {MessageType.LOAN_ISSUED, MessageType.RETURN_RECEIVED, MessageType.STOCK_CORRECTED}
)

SUBSCRIPTIONS: dict[str, Subscription] = {
    s.name: s
    for s in (
        Subscription(
            name="notification",
            accepts=frozenset({MessageType.LOAN_ISSUED, MessageType.RETURN_RECEIVED}),
            handler="library.subscribers.notify_member",
        ),
        Subscription(
            name="stock_summary",
            accepts=LIBRARY_TYPES,
            handler="library.subscribers.refresh_branch_stock",
        ),
        Subscription(
            name="broadcast",
            accepts=LIBRARY_TYPES,
            handler="library.subscribers.broadcast_branch_stock",
            after_batch="library.subscribers.broadcast_flush",
            # A broadcast is worth little once stale: give up sooner.
            max_attempts=3,
            backoff=Backoff(base_ms=200, cap_ms=2_000),
        ),
        Subscription(
            name="cache_invalidation",
            accepts=LIBRARY_TYPES,
            handler="library.subscribers.invalidate_caches",
            # Retries ride out a Redis restart: ten attempts with the default
            # backoff span about two minutes, about the list pages' lifetime,
            # after which a missed bump has aged out anyway.
            max_attempts=10,
        ),
        Subscription(
            name="book_ledger",
            accepts=LIBRARY_TYPES,
            handler="library.subscribers.ledger_append",
            # Per-book order matters here (a version may only follow a lower one):
            # partitioned by book id, one worker per partition.
            partitions=4,
            max_attempts=3,
            backoff=Backoff(base_ms=100, cap_ms=2_000),
        ),
        Subscription(
            name="lab_slow",
            accepts=frozenset({MessageType.LAB_PROBE}),
            handler="messaging.probes.apply_slow_probe",
            outside="messaging.probes.slow_probe_work",
            lane="slow",
            starts_active=False,
        ),
        Subscription(
            name="lab_late",
            accepts=frozenset({MessageType.LAB_PROBE}),
            handler="messaging.probes.apply_late_probe",
            starts_active=False,
        ),
        Subscription(
            name="lab_probe",
            accepts=frozenset({MessageType.LAB_PROBE}),
            handler="messaging.probes.apply_probe",
            # The threshold of the dead-letter and poison lessons.
            max_attempts=3,
            backoff=Backoff(base_ms=50, cap_ms=400),
            # Short: a lab waits seconds, not half a minute, for a dead worker's lease.
            visibility=datetime.timedelta(seconds=2),
        ),
    )
}


STREAM_CONSUMERS: dict[str, StreamSpec] = {
    c.name: c
    for c in (
        StreamSpec(
            name="stock_projection",
            accepts=LIBRARY_TYPES,
            handler="library.subscribers.stock_project",
            reset="library.subscribers.stock_projection_reset",
        ),
    )
}


def lanes() -> list[str]:
    """Return every drain lane, the main one first."""
    others = sorted({s.lane for s in SUBSCRIPTIONS.values()} - {"main"})
    return ["main", *others]


def subscriptions_for(message_type: str) -> list[Subscription]:
    """Return the subscriptions whose filter accepts ``message_type``."""
    return [s for s in SUBSCRIPTIONS.values() if message_type in s.accepts]


def check_registry() -> None:
    """Refuse a message type that no subscription would ever see."""
    unhandled = sorted(t.value for t in MessageType if not subscriptions_for(t))
    if unhandled:
        raise ImproperlyConfigured(f"message types without a subscription: {unhandled}")


check_registry()
