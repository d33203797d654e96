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


def subscriptions_for(message_type: str) -> list[Subscription]:
    """Return the subscriptions whose filter accepts ``message_type``."""
    return [s for s in SUBSCRIPTIONS.values() if message_type in s.accepts]


def check_registry() -> None:
    """Refuse a message type that no subscription would ever see."""
    unhandled = sorted(t.value for t in MessageType if not subscriptions_for(t))
    if unhandled:
        raise ImproperlyConfigured(f"message types without a subscription: {unhandled}")


check_registry()
