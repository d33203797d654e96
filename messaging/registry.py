"""The typed registry of message types, the subscriptions that consume them, and
their handlers.

The library's types and subscriptions are declared here: they are the vocabulary the
delivery machinery and its admin speak. Another app adds its own from its ``ready()``
(``message_type_register``, ``subscription_register``; the course's probes do). Each
handler is bound by the app that owns it, with a decorator (``subscription_handler``,
``after_batch_handler``, ``outside_handler``, ``stream_handler``,
``stream_reset_handler``) in a module its ``ready()`` imports. The system check
(``messaging.checks``) then refuses a subscription whose handler is missing and a
message type no subscription sees, so an event can never be published into the void.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypedDict, TypeVar

from messaging.policies import Backoff


class MessageType(StrEnum):
    """The library's message types (other apps register theirs by name)."""

    LOAN_ISSUED = "loan_issued"
    RETURN_RECEIVED = "return_received"
    STOCK_CORRECTED = "stock_corrected"


class LoanBody(TypedDict):
    loan_id: int
    book_id: int
    member_id: int
    branch_id: int
    on_shelf: int
    book_version: int
    # The branch's stock version and shelf total right after this change: what a
    # live page at the previous version must show next (realtime.broadcast).
    branch_version: int
    branch_total: int


class StockBody(TypedDict):
    book_id: int
    branch_id: int
    on_shelf: int
    book_version: int
    branch_version: int
    branch_total: int


@dataclass(frozen=True)
class Subscription:
    name: str
    # Message type names (a ``MessageType`` is one). Its handler, ``handler(message)
    # -> None``, is bound with ``@subscription_handler(name)`` and runs in the guard's
    # transaction.
    accepts: frozenset[str]
    max_attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    # The lease (visibility timeout): a claimed delivery not finished by then is
    # claimed again by another worker. None: settings.MESSAGING_LEASE_SECONDS.
    visibility: datetime.timedelta | None = None
    # True: a ``flush() -> None`` (``@after_batch_handler(name)``) runs after every
    # batch that held deliveries of this subscription, outside any transaction: it
    # sends, in one go, the network effects the handler queued after its commits
    # (one round trip per batch, not one per message).
    after_batch: bool = False
    # > 0: the deliveries are split by a hash of the message key into this many
    # partitions, each processed in offset order by one worker at a time
    # (messaging.services.partitions). For effects whose correctness depends on
    # per-key order.
    partitions: int = 0
    # The drain lane. Each lane is drained by rq jobs of its own, so a subscription
    # known to be slow, given a lane of its own, never holds up the others' batches.
    lane: str = "main"
    # False: declared in code but takes no copies until started (admin or lab).
    starts_active: bool = True
    # True: a ``work(message) -> None`` (``@outside_handler(name)``) runs BEFORE the
    # effect's transaction:
    # slow work (a network call) that must not hold the database meanwhile (on
    # SQLite a transaction holds the only write lock, so a slow handler inside it
    # would stall every other subscription and the relay). It is not guarded by
    # the dedup row, so it may run again on a retry: it must tolerate repeats.
    outside: bool = False


@dataclass(frozen=True)
class StreamSpec:
    """A named reader of the outbox log (one copy, an offset per consumer).

    ``handler(message)`` (``@stream_handler(name)``) runs in the transaction that
    also moves the offset, so the projection and the offset never disagree.
    ``reset()`` (``@stream_reset_handler(name)``) empties the projection before a
    rebuild from the start of the log.
    """

    name: str
    accepts: frozenset[str]
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
        ),
        Subscription(
            name="stock_summary",
            accepts=LIBRARY_TYPES,
        ),
        Subscription(
            name="broadcast",
            accepts=LIBRARY_TYPES,
            after_batch=True,
            # A broadcast is worth little once stale: give up sooner.
            max_attempts=3,
            backoff=Backoff(base_ms=200, cap_ms=2_000),
        ),
        Subscription(
            name="cache_invalidation",
            accepts=LIBRARY_TYPES,
            # Retries ride out a Redis restart: ten attempts with the default
            # backoff span about two minutes, about the list pages' lifetime,
            # after which a missed bump has aged out anyway.
            max_attempts=10,
        ),
        Subscription(
            name="book_ledger",
            accepts=LIBRARY_TYPES,
            # Per-book order matters here (a version may only follow a lower one):
            # partitioned by book id, one worker per partition.
            partitions=4,
            max_attempts=3,
            backoff=Backoff(base_ms=100, cap_ms=2_000),
        ),
    )
}


STREAM_CONSUMERS: dict[str, StreamSpec] = {
    c.name: c
    for c in (
        StreamSpec(
            name="stock_projection",
            accepts=LIBRARY_TYPES,
        ),
    )
}


# Registered handlers, by subscription or stream consumer name.
# A handler takes the OutboxMessage. Typed with Any: the models import this module
# (the type field's choices), so it imports no model, not even for typing.
Handler = Callable[[Any], None]
Flush = Callable[[], None]
# Optional: applies several messages of one subscription at once, in offset order,
# with the same result as its handler applied to each in turn (group commit). Kept
# with the one-message handler it stands for: used only while that one is bound.
GroupHandler = Callable[[list[Any]], None]
HANDLERS: dict[str, Handler] = {}
GROUP_HANDLERS: dict[str, tuple[Handler, GroupHandler]] = {}
AFTER_BATCH: dict[str, Flush] = {}
OUTSIDE: dict[str, Handler] = {}
STREAM_HANDLERS: dict[str, Handler] = {}
# Optional, like GROUP_HANDLERS: applies a stream batch's accepted messages at once
# (one statement instead of one per message), with the result of its handler
# applied to each in turn. Used only while that one-message handler is bound.
STREAM_BATCH_HANDLERS: dict[str, tuple[Handler, GroupHandler]] = {}
STREAM_RESETS: dict[str, Flush] = {}

# Every message type a publisher may use, in registration order.
MESSAGE_TYPES: dict[str, None] = dict.fromkeys(MessageType)

_F = TypeVar("_F", bound=Callable[..., Any])


def message_type_register(name: str) -> str:
    """Declare a message type another app publishes; return its name."""
    MESSAGE_TYPES[name] = None
    return name


def message_type_choices() -> list[tuple[str, str]]:
    """Return the registered types as model field choices."""
    return [(name, name) for name in MESSAGE_TYPES]


def subscription_register(*subscriptions: Subscription) -> None:
    """Declare subscriptions another app owns (call from its ``ready()``)."""
    for subscription in subscriptions:
        SUBSCRIPTIONS[subscription.name] = subscription


def _binder(table: dict[str, Any], name: str) -> Callable[[_F], _F]:
    def bind(function: _F) -> _F:
        table[name] = function
        return function

    return bind


def subscription_handler(subscription: str) -> Callable[[_F], _F]:
    """Bind the decorated ``handler(message)`` as the effect of ``subscription``."""
    return _binder(HANDLERS, subscription)


def group_handler(subscription: str, *, single: Handler) -> Callable[[_F], _F]:
    """Bind the decorated ``apply(messages)`` as ``subscription``'s group effect.

    Used when a group commit holds several of the subscription's deliveries, and
    only while ``single`` is the subscription's handler (one swapped in, by a test
    or a lab, then runs message by message); it must leave what ``single`` would,
    applied to each message in order.
    """

    def bind(function: _F) -> _F:
        GROUP_HANDLERS[subscription] = (single, function)
        return function

    return bind


def group_handler_for(subscription: str) -> GroupHandler | None:
    """Return the group effect of ``subscription`` if it stands for its handler."""
    pair = GROUP_HANDLERS.get(subscription)
    if pair is None or HANDLERS.get(subscription) is not pair[0]:
        return None
    return pair[1]


def after_batch_handler(subscription: str) -> Callable[[_F], _F]:
    """Bind the decorated ``flush()`` as ``subscription``'s after-batch step."""
    return _binder(AFTER_BATCH, subscription)


def outside_handler(subscription: str) -> Callable[[_F], _F]:
    """Bind the decorated ``work(message)`` as ``subscription``'s slow part."""
    return _binder(OUTSIDE, subscription)


def stream_handler(consumer: str) -> Callable[[_F], _F]:
    """Bind the decorated ``handler(message)`` as stream ``consumer``'s effect."""
    return _binder(STREAM_HANDLERS, consumer)


def stream_batch_handler(consumer: str, *, single: Handler) -> Callable[[_F], _F]:
    """Bind the decorated ``apply(messages)`` as ``single`` for a whole batch."""

    def bind(function: _F) -> _F:
        STREAM_BATCH_HANDLERS[consumer] = (single, function)
        return function

    return bind


def stream_batch_handler_for(consumer: str) -> GroupHandler | None:
    """Return the consumer's batch handler, if bound beside its current handler."""
    single, batch = STREAM_BATCH_HANDLERS.get(consumer, (None, None))
    return (
        batch
        if single is not None and STREAM_HANDLERS.get(consumer) is single
        else None
    )


def stream_reset_handler(consumer: str) -> Callable[[_F], _F]:
    """Bind the decorated ``reset()`` as stream ``consumer``'s rebuild start."""
    return _binder(STREAM_RESETS, consumer)


def lanes() -> list[str]:
    """Return every drain lane, the main one first."""
    others = sorted({s.lane for s in SUBSCRIPTIONS.values()} - {"main"})
    return ["main", *others]


def subscriptions_for(message_type: str) -> list[Subscription]:
    """Return the subscriptions whose filter accepts ``message_type``."""
    return [s for s in SUBSCRIPTIONS.values() if message_type in s.accepts]
