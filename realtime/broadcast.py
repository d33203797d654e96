"""The ``broadcast`` subscription: a change's shelf counts sent to its branch's pages.

The handler runs in the delivery's transaction and only queues the event; the batch's
after-batch step sends every queued event to its ``branch-<id>`` group in one event
loop, counting each send (``realtime.accounting``): on the Redis layer as one frame
published to the group's fan-out channel (``realtime.fanout``), on channels'
in-process layer as a group message. Both are bound to the
subscription (declared in ``messaging.registry``) when ``RealtimeConfig.ready()``
imports this module.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from library.selectors.stock import branch_stock_state
from messaging.errors import body_int
from messaging.models import OutboxMessage
from messaging.registry import (
    after_batch_handler,
    group_handler,
    subscription_handler,
)
from realtime.accounting import broadcasts_record
from realtime.fanout import LAYER_ERRORS, fanout_publish_sync, fanout_supported


def broadcasts_send(layer: Any, messages: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Send each ``(group, event)`` on ``layer``; count the sends.

    On the Redis layer each event goes out as its sockets' frame, encoded once and
    published to the group's fan-out channel (``realtime.fanout``): every process
    holding sockets of the group writes it to them. On another layer (channels'
    in-process one) it is a ``group_send``, which the consumers forward.

    Call from synchronous code (a worker's drain, a sync view). A send that raises
    stops the rest and propagates; the ones already made are counted first.
    """
    sent: list[str] = []

    async def group_send_all() -> None:
        for group, event in messages:
            await layer.group_send(group, event)
            sent.append(group)

    try:
        if fanout_supported(layer):
            frames = [(group, update_frame(event)) for group, event in messages]
            try:
                sent.extend(fanout_publish_sync(layer, frames))
            except LAYER_ERRORS as error:
                sent.extend(getattr(error, "sent", []))
                raise
        else:
            async_to_sync(group_send_all)()
    finally:
        broadcasts_record(sent)


def update_frame(event: dict[str, Any]) -> str:
    """Return the text frame a live page receives for a ``stock.update`` event."""
    return json.dumps({**event, "type": "update"}, separators=(",", ":"))


# Events of committed broadcast deliveries waiting for the end of the batch. A worker
# process drains one batch at a time, so the list belongs to the batch in hand; it is
# guarded anyway, as a process may run drains on threads (the tests do).
_pending_broadcasts: list[dict[str, Any]] = []
_pending_lock = threading.Lock()


@subscription_handler("broadcast")
def broadcast_branch_stock(message: OutboxMessage) -> None:
    """Queue the changed book's count and the branch total for the branch's pages.

    The event is queued only once the guard row has committed, and sent by
    ``broadcast_flush`` at the end of the batch: network I/O stays out of the
    transaction, and a batch costs one trip to the channel layer, not one per loan.
    """
    _queue([_event(message, {})])


@group_handler("broadcast", single=broadcast_branch_stock)
def broadcast_branch_stocks(messages: list[OutboxMessage]) -> None:
    """``broadcast_branch_stock`` for several messages (older bodies' fallback read
    of a branch's state is made once per branch)."""
    states: dict[int, dict[str, Any]] = {}
    _queue([_event(message, states) for message in messages])


def _event(message: OutboxMessage, states: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The update of the message's own version: the change and the total after it.

    The message carries the branch's version and total as its change committed
    them (``library.services.loans``), so however late it is delivered, the update
    says exactly what version V changed. A page applies only the next version: an
    update labelled with a later version than its own change would hide the change
    of that later version. A message written before bodies carried them falls back
    to the branch's state read now (``states`` keeps one read per branch).
    """
    body = message.body
    branch_id = body_int(body, "branch_id")
    book_id = body_int(body, "book_id")
    event: dict[str, Any] = {
        "type": "stock.update",
        "branch": branch_id,
        "book": book_id,
        "offset": message.pk,
    }
    if "branch_version" in body and "branch_total" in body:
        return {
            **event,
            "version": body_int(body, "branch_version"),
            "total": body_int(body, "branch_total"),
            "on_shelf": body_int(body, "on_shelf"),
        }
    if branch_id not in states:
        states[branch_id] = branch_stock_state(branch_id)
    state = states[branch_id]
    return {
        **event,
        "version": state["version"],
        "total": state["total"],
        "on_shelf": state["books"].get(str(book_id), 0),
    }


def _queue(events: list[dict[str, Any]]) -> None:
    def queue() -> None:
        with _pending_lock:
            _pending_broadcasts.extend(events)

    transaction.on_commit(queue)


@after_batch_handler("broadcast")
def broadcast_flush() -> None:
    """Send the queued events to their branches' groups, in one event loop.

    A failed send is logged by the caller, not retried: the deliveries are done, and
    a page that misses a version asks for a fresh snapshot.
    """
    with _pending_lock:
        events = list(_pending_broadcasts)
        _pending_broadcasts.clear()
    layer = get_channel_layer()
    if not events or layer is None:
        return
    broadcasts_send(layer, [(f"branch-{event['branch']}", event) for event in events])
