"""Effects of the library's subscriptions and stream consumer.

The subscriptions are declared in ``messaging.registry``; each effect is bound to its
subscription here, with the registry's decorators, when ``LibraryConfig.ready()``
imports this module. Each handler runs inside the transaction that also inserts the
dedup guard row, so its database writes happen once per message. The broadcast of a
change to the live pages is realtime's handler (``realtime.broadcast``).
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Count, Max, Sum

from library.cache import reads
from library.models import (
    Book,
    BookLedger,
    BranchStock,
    Notification,
    StockProjection,
)
from messaging.errors import body_int
from messaging.models import OutboxMessage
from messaging.registry import (
    MessageType,
    group_handler,
    stream_batch_handler,
    stream_handler,
    stream_reset_handler,
    subscription_handler,
)

_TEXTS = {
    MessageType.LOAN_ISSUED: "You borrowed “{title}”. Enjoy the read!",
    MessageType.RETURN_RECEIVED: "We received “{title}” back. Thank you!",
}


@subscription_handler("notification")
def notify_member(message: OutboxMessage) -> None:
    """Write the member's notification for a loan or a return."""
    loan_id = body_int(message.body, "loan_id")
    member_id = body_int(message.body, "member_id")
    book = Book.objects.only("title").get(pk=body_int(message.body, "book_id"))
    Notification.objects.create(
        member_id=member_id,
        loan_id=loan_id,
        kind=message.type,
        text=_TEXTS[MessageType(message.type)].format(title=book.title),
        source_message_id=message.pk,
    )


@group_handler("notification", single=notify_member)
def notify_members(messages: list[OutboxMessage]) -> None:
    """``notify_member`` for several messages: one read of the titles, one INSERT."""
    book_ids = {body_int(m.body, "book_id") for m in messages}
    titles = dict(Book.objects.filter(pk__in=book_ids).values_list("pk", "title"))
    notes = []
    for message in messages:
        book_id = body_int(message.body, "book_id")
        if book_id not in titles:
            raise Book.DoesNotExist(f"book {book_id} of message {message.pk}")
        notes.append(
            Notification(
                member_id=body_int(message.body, "member_id"),
                loan_id=body_int(message.body, "loan_id"),
                kind=message.type,
                text=_TEXTS[MessageType(message.type)].format(title=titles[book_id]),
                source_message_id=message.pk,
            )
        )
    Notification.objects.bulk_create(notes)


@subscription_handler("stock_summary")
def refresh_branch_stock(message: OutboxMessage) -> None:
    """Recompute the branch's totals; newer offsets win, so replays converge."""
    branch_id = body_int(message.body, "branch_id")
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


@group_handler("stock_summary", single=refresh_branch_stock)
def refresh_branch_stocks(messages: list[OutboxMessage]) -> None:
    """``refresh_branch_stock`` once per branch of the messages, with its newest.

    The totals are recomputed from the books, not added up from the messages, so
    once per branch leaves what one recount per message would.
    """
    newest: dict[int, OutboxMessage] = {}
    for message in messages:
        newest[body_int(message.body, "branch_id")] = message
    # In branch order: two groups locking the same summaries take them in the same
    # order, so they wait for each other instead of deadlocking.
    for branch_id in sorted(newest):
        refresh_branch_stock(newest[branch_id])


@subscription_handler("cache_invalidation")
def invalidate_caches(message: OutboxMessage) -> None:
    """Retire the cached pages a loan, a return or a stock correction made stale.

    The branch's list and search generations are bumped and its stock page deleted
    (the next read rebuilds it); for a loan or a return, the member's history
    generation is bumped too; the book's version record is deleted if it is older
    than the message's version (its commit hook met a Redis error).

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
        member_id = body_int(message.body, "member_id")
    reads.change_invalidate(
        body_int(message.body, "branch_id"), member_id, book=_book_retired(message)
    )


# A version above any real one: the record goes whatever version it names.
_ANY_VERSION = 2**62


def _book_retired(message: OutboxMessage) -> tuple[int, int] | None:
    """The book whose version record the change retires, with the version it
    reached; a body without the version (a correction some producer wrote without
    it) retires the record whatever it says: one database read on the next hit
    costs less than a delivery that can never succeed."""
    if "book_id" not in message.body:
        return None
    book_id = body_int(message.body, "book_id")
    if "book_version" not in message.body:
        return book_id, _ANY_VERSION
    return book_id, body_int(message.body, "book_version")


# --- ordered and stream consumers --------------------------------------------------


@subscription_handler("book_ledger")
def ledger_append(message: OutboxMessage) -> None:
    """Record the book's change in the ledger, noting whether it arrived in order.

    Runs in the ``book_ledger`` subscription, partitioned by book id: all of a
    book's messages go to one partition, processed by one worker at a time in offset
    order, so a version should always follow a lower one.
    """
    book_id = body_int(message.body, "book_id")
    version = body_int(message.body, "book_version")
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


@group_handler("book_ledger", single=ledger_append)
def ledger_append_run(messages: list[OutboxMessage]) -> None:
    """``ledger_append`` for a partition's run, in offset order: one read of each
    book's newest version, one INSERT."""
    book_ids = {body_int(m.body, "book_id") for m in messages}
    newest: dict[int, int] = dict(
        BookLedger.objects.filter(book_id__in=book_ids)
        .values("book_id")
        .annotate(top=Max("book_version"))
        .values_list("book_id", "top")
    )
    rows = []
    for message in sorted(messages, key=lambda m: m.pk):
        book_id = body_int(message.body, "book_id")
        version = body_int(message.body, "book_version")
        before = newest.get(book_id)
        rows.append(
            BookLedger(
                book_id=book_id,
                message_id=message.pk,
                book_version=version,
                kind=message.type,
                in_order=before is None or before < version,
            )
        )
        newest[book_id] = version if before is None else max(before, version)
    BookLedger.objects.bulk_create(rows)


@stream_handler("stock_projection")
def stock_project(message: OutboxMessage) -> None:
    """Apply one message to the stock projection; an older version never wins.

    Every library message carries the book's shelf count and version after the
    change, so the projection needs nothing but the log, and replaying a message it
    already reflects changes nothing.
    """
    book_id = body_int(message.body, "book_id")
    version = body_int(message.body, "book_version")
    values = {
        "branch_id": body_int(message.body, "branch_id"),
        "on_shelf": body_int(message.body, "on_shelf"),
        "book_version": version,
        "offset": message.pk,
    }
    updated = StockProjection.objects.filter(
        book_id=book_id, book_version__lt=version
    ).update(**values)
    if not updated and not StockProjection.objects.filter(book_id=book_id).exists():
        StockProjection.objects.create(book_id=book_id, **values)


@stream_batch_handler("stock_projection", single=stock_project)
def stock_project_batch(messages: list[OutboxMessage]) -> None:
    """``stock_project`` for a stream batch, in one statement.

    Per book only the message with the highest version can win (applied in turn,
    each later one replaces an earlier one only with a higher version; on a tie the
    first stays), so the batch is folded to that message per book first, then one
    upsert writes them all, keeping a row whose version is already as high.
    """
    newest: dict[int, tuple[int, int, int, int]] = {}
    for message in messages:
        book_id = body_int(message.body, "book_id")
        row = (
            body_int(message.body, "branch_id"),
            body_int(message.body, "on_shelf"),
            body_int(message.body, "book_version"),
            message.pk,
        )
        if book_id not in newest or newest[book_id][2] < row[2]:
            newest[book_id] = row
    if not newest:
        return
    table = connection.ops.quote_name(StockProjection._meta.db_table)
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(newest))
    params = [v for book_id, row in newest.items() for v in (book_id, *row)]
    # The same statement on PostgreSQL and SQLite (3.24+): the WHERE keeps a row
    # whose version is as high or higher, as stock_project's filter does.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} AS p"
            ' (book_id, branch_id, on_shelf, book_version, "offset")'
            f" VALUES {values}"
            " ON CONFLICT (book_id) DO UPDATE SET branch_id = excluded.branch_id,"
            " on_shelf = excluded.on_shelf, book_version = excluded.book_version,"
            ' "offset" = excluded."offset"'
            " WHERE p.book_version < excluded.book_version",
            params,
        )


@stream_reset_handler("stock_projection")
def stock_projection_reset() -> None:
    """Empty the projection before a replay rebuilds it from the log."""
    StockProjection.objects.all().delete()
