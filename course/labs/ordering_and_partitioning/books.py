"""The ordering lab's own books: created per live run, deleted once processed."""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field

from library.models import Book, BookLedger, Branch, StockProjection
from messaging.models import Delivery, StreamConsumer
from messaging.registry import STREAM_CONSUMERS

log = logging.getLogger("course.live")


@dataclass
class LabBooks:
    """The live run's own branch and books; model book k is live book ``ids[k]``."""

    branch_id: int
    ids: dict[int, int]
    created: list[int] = field(default_factory=list)
    message_ids: list[int] = field(default_factory=list)


def books_create(run: str, books: int, partitions: int) -> LabBooks:
    """Create a branch and one live book per model book, on the model's partition.

    Book ids come from the database, so books are created until, for every model
    book ``k``, one has ``id mod partitions == k mod partitions``: the real router
    (book id modulo the partition count) then puts every live book on the partition
    the model puts its model book on. The extra books are deleted with the others.
    """

    branch = Branch.objects.create(name=f"Lab ordering {run}", city="Lab")
    lab = LabBooks(branch_id=branch.pk, ids={})
    while len(lab.ids) < books:
        book = Book.objects.create(
            title=f"Lab ordering {run} #{len(lab.created) + 1}",
            author="Lab",
            branch=branch,
        )
        lab.created.append(book.pk)
        for k in range(1, books + 1):
            if k not in lab.ids and book.pk % partitions == k % partitions:
                lab.ids[k] = book.pk
                break
    return lab


def lab_messages_settled(lab: LabBooks) -> bool:

    return not Delivery.objects.filter(
        message_id__in=lab.message_ids, status=Delivery.Status.PENDING
    ).exists()


def lab_messages_pending(lab: LabBooks) -> str:
    """Say which subscriptions still have a pending copy of the run's messages."""
    pending = (
        Delivery.objects.filter(
            message_id__in=lab.message_ids, status=Delivery.Status.PENDING
        )
        .values_list("subscription", "attempts")
        .order_by("subscription")
    )
    counts: dict[str, list[int]] = {}
    for subscription, attempts in pending:
        counts.setdefault(subscription, []).append(attempts)
    return ", ".join(
        f"{name}: {len(tries)} pending, up to {max(tries)} attempts"
        for name, tries in counts.items()
    )


def stream_passed(last: int) -> bool:

    offsets = dict(StreamConsumer.objects.values_list("name", "offset"))
    return all(offsets.get(name, 0) >= last for name in STREAM_CONSUMERS)


def books_delete(lab: LabBooks) -> None:
    """Delete the run's ledger rows, books and branch, if no delivery still needs them.

    A pending delivery of a lab message (the run failed half-way) would fail on a
    missing book or branch, retry and end among the dead letters: the books are then
    left in place and the log says so. Projection rows go only once every stream
    consumer has read past the run's last message (or it would write them again).
    """

    if lab.message_ids and not lab_messages_settled(lab):
        log.warning("live ordering lab: deliveries pending, books %s kept", lab.created)
        return
    BookLedger.objects.filter(book_id__in=lab.created).delete()
    if not lab.message_ids or stream_passed(max(lab.message_ids)):
        StockProjection.objects.filter(book_id__in=lab.created).delete()
    Book.objects.filter(pk__in=lab.created).delete()
    Branch.objects.filter(pk=lab.branch_id).delete()


def as_aware(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)
