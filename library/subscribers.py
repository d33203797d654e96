"""Effects of the library's subscriptions (messaging.registry names them).

Each handler runs inside the transaction that also inserts the dedup guard row, so its
database writes happen once per message. Network effects (the broadcast) are sent
after that transaction commits and may repeat: receivers order them by version.
"""

from __future__ import annotations

import threading
from typing import Any

from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models import Count, Sum

from library.cache import reads
from library.models import (
    Book,
    BookLedger,
    Branch,
    BranchStock,
    Notification,
    StockProjection,
)
from messaging.errors import PermanentMessageError
from messaging.models import OutboxMessage
from messaging.registry import MessageType
from realtime.accounting import broadcasts_send

_TEXTS = {
    MessageType.LOAN_ISSUED: "You borrowed “{title}”. Enjoy the read!",
    MessageType.RETURN_RECEIVED: "We received “{title}” back. Thank you!",
}


class MessageBodyError(PermanentMessageError):
    """The message body lacks what the handler needs; retrying will not help."""


def _field(body: Any, name: str) -> int:
    if not isinstance(body, dict) or not isinstance(body.get(name), int):
        raise MessageBodyError(f"message body has no integer {name!r}")
    value: int = body[name]
    return value


def notify_member(message: OutboxMessage) -> None:
    """Write the member's notification for a loan or a return."""
    loan_id = _field(message.body, "loan_id")
    member_id = _field(message.body, "member_id")
    book = Book.objects.only("title").get(pk=_field(message.body, "book_id"))
    Notification.objects.create(
        member_id=member_id,
        loan_id=loan_id,
        kind=message.type,
        text=_TEXTS[MessageType(message.type)].format(title=book.title),
        source_message_id=message.pk,
    )


def branch_stock_state(branch_id: int) -> dict[str, Any]:
    """Return the branch's live shelf state: version, total and per-book counts."""
    branch = Branch.objects.only("stock_version").get(pk=branch_id)
    books = list(
        Book.objects.filter(branch_id=branch_id)
        .order_by("id")
        .values_list("id", "on_shelf")
    )
    return {
        "branch": branch_id,
        "version": branch.stock_version,
        "total": sum(n for _, n in books),
        "books": {str(pk): n for pk, n in books},
    }


def refresh_branch_stock(message: OutboxMessage) -> None:
    """Recompute the branch's totals; newer offsets win, so replays converge."""
    branch_id = _field(message.body, "branch_id")
    totals = Book.objects.filter(branch_id=branch_id).aggregate(
        on_shelf=Sum("on_shelf"), titles=Count("id")
    )
    summary, _ = BranchStock.objects.select_for_update().get_or_create(
        branch_id=branch_id
    )
    summary.on_shelf_total = totals["on_shelf"] or 0
    summary.titles = totals["titles"]
    summary.last_message_id = max(summary.last_message_id, message.pk)
    summary.save()


# Events of committed broadcast deliveries waiting for the end of the batch. A worker
# process drains one batch at a time, so the list belongs to the batch in hand; it is
# guarded anyway, as a process may run drains on threads (the tests do).
_pending_broadcasts: list[dict[str, Any]] = []
_pending_lock = threading.Lock()


def broadcast_branch_stock(message: OutboxMessage) -> None:
    """Queue the changed book's count and the branch total for the branch's pages.

    The event is queued only once the guard row has committed, and sent by
    ``broadcast_flush`` at the end of the batch: network I/O stays out of the
    transaction, and a batch costs one trip to the channel layer, not one per loan.
    """
    branch_id = _field(message.body, "branch_id")
    book_id = _field(message.body, "book_id")
    state = branch_stock_state(branch_id)
    event = {
        "type": "stock.update",
        "branch": branch_id,
        "version": state["version"],
        "total": state["total"],
        "book": book_id,
        "on_shelf": state["books"].get(str(book_id), 0),
        "offset": message.pk,
    }

    def queue() -> None:
        with _pending_lock:
            _pending_broadcasts.append(event)

    transaction.on_commit(queue)


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
    # Sent in one event loop and counted per group (realtime.accounting).
    broadcasts_send(layer, [(f"branch-{event['branch']}", event) for event in events])


def invalidate_caches(message: OutboxMessage) -> None:
    """Retire the cached pages a loan, a return or a stock correction made stale.

    The branch's list and search generations are bumped and its stock page written
    through; for a loan or a return, the member's history generation is bumped too.

    This is Redis I/O inside the delivery's transaction, against the house rule, and
    on purpose: it is the least bad of the options ``delivery_process`` leaves.

    - ``transaction.on_commit(bump, robust=False)`` would run after the done mark has
      committed; a failed bump then raises into a retry whose update finds the
      delivery already done, so the invalidation is lost while the log says "retry".
    - Inside the transaction, a failed bump raises, the guard row and the done mark
      roll back, and the delivery is retried with backoff (then dead-lettered, and
      can be redriven): no bump is ever lost.

    What the rule protects against does not apply here: the change being announced
    committed before the message was relayed, so a reader that misses right after
    the bump reloads committed data, never a value that could roll back. If the
    delivery's own transaction rolls back after a bump (a lost lease), the retry
    bumps again: a second bump costs one extra miss and nothing else. The cost left
    is the guard row's lock held for one Redis round trip (at most the cache client's
    one-second timeout).
    """
    member_id = None
    if message.type in (MessageType.LOAN_ISSUED, MessageType.RETURN_RECEIVED):
        member_id = _field(message.body, "member_id")
    reads.change_invalidate(_field(message.body, "branch_id"), member_id)


# --- ordered and stream consumers --------------------------------------------------


def ledger_append(message: OutboxMessage) -> None:
    """Record the book's change in the ledger, noting whether it arrived in order.

    Runs in the ``book_ledger`` subscription, partitioned by book id: all of a
    book's messages go to one partition, processed by one worker at a time in offset
    order, so a version should always follow a lower one.
    """
    book_id = _field(message.body, "book_id")
    version = _field(message.body, "book_version")
    newest = (
        BookLedger.objects.filter(book_id=book_id)
        .order_by("-book_version")
        .values_list("book_version", flat=True)
        .first()
    )
    BookLedger.objects.create(
        book_id=book_id,
        message_id=message.pk,
        book_version=version,
        kind=message.type,
        in_order=newest is None or newest < version,
    )


def stock_project(message: OutboxMessage) -> None:
    """Apply one message to the stock projection; an older version never wins.

    Every library message carries the book's shelf count and version after the
    change, so the projection needs nothing but the log, and replaying a message it
    already reflects changes nothing.
    """
    book_id = _field(message.body, "book_id")
    version = _field(message.body, "book_version")
    values = {
        "branch_id": _field(message.body, "branch_id"),
        "on_shelf": _field(message.body, "on_shelf"),
        "book_version": version,
        "offset": message.pk,
    }
    updated = StockProjection.objects.filter(
        book_id=book_id, book_version__lt=version
    ).update(**values)
    if not updated and not StockProjection.objects.filter(book_id=book_id).exists():
        StockProjection.objects.create(book_id=book_id, **values)


def stock_projection_reset() -> None:
    """Empty the projection before a replay rebuilds it from the log."""
    StockProjection.objects.all().delete()
