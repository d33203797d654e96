"""Head-of-line blocking on the real ``book_ledger``: one bad change holds a partition.

A change that can never apply (its body lacks the book's version) is published for
one book, then good changes alternate between books of the same partition and books
of other partitions. The partition keeps its order, so everything queued behind the
bad head waits until the head has used its attempts and become a dead letter; the
other partitions flow meanwhile. Waits are commit-to-ledger times (the message's
``created_at`` to the ledger row's ``recorded_at``), as the rows recorded them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import transaction

from course.labs.harness import live as harness
from course.labs.ordering_and_partitioning.books import LabBooks
from library.models import BookLedger
from library.services import stock_correct
from messaging.models import DeadLetter, Delivery, OutboxMessage
from messaging.registry import MessageType
from messaging.services import outbox_publish

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem

GOOD_CHANGES = 6  # behind the head, and as many on the other partitions
LEDGER = "book_ledger"


def _publish_unusable(lab: LabBooks, book_id: int) -> int:

    with transaction.atomic():
        message = outbox_publish(
            type=MessageType.STOCK_CORRECTED,
            key=book_id,
            body={"book_id": book_id, "branch_id": lab.branch_id, "on_shelf": 0},
        )
    return message.pk


def _mean_ms(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 1) if values else None


@dataclass(frozen=True)
class Blocking:
    """What a bad head did to its partition, beside the partitions it did not hold."""

    blocked_events: int
    average_wait_ms: float | None
    alone_average_wait_ms: float | None
    head_attempts: int
    head_outcome: str


def live_head_of_line(system: LiveSystem, lab: LabBooks, partitions: int) -> Blocking:
    """Publish a bad head, then good changes behind it and beside it; time them."""

    books = sorted(lab.ids.values())
    head_book = books[0]
    same = [b for b in books if b % partitions == head_book % partitions]
    other = [b for b in books if b % partitions != head_book % partitions]
    if not other:
        return Blocking(0, None, None, 0, "no other partition to compare with")
    bad = _publish_unusable(lab, head_book)
    lab.message_ids.append(bad)
    blocked: list[int] = []
    alone: list[int] = []
    for n in range(GOOD_CHANGES):
        for book, into in (
            (same[n % len(same)], blocked),
            (other[n % len(other)], alone),
        ):
            stock_correct(book_id=book, on_shelf=n + 1)
            newest = OutboxMessage.objects.filter(key=str(book)).latest("id").pk
            into.append(newest)
            lab.message_ids.append(newest)
    wanted = blocked + alone
    harness.wait_until(
        lambda: BookLedger.objects.filter(message_id__in=wanted).count() == len(wanted),
        what="the ledger rows behind and beside the bad head",
        timeout=60,
        system=system,
    )
    created = dict(
        OutboxMessage.objects.filter(pk__in=wanted).values_list("pk", "created_at")
    )
    recorded = dict(
        BookLedger.objects.filter(message_id__in=wanted).values_list(
            "message_id", "recorded_at"
        )
    )

    def waits(ids: list[int]) -> list[float]:
        return [(recorded[i] - created[i]).total_seconds() * 1000 for i in ids]

    head = Delivery.objects.get(message_id=bad, subscription=LEDGER)
    outcome = "dead letter" if head.status == Delivery.Status.DEAD else head.status
    # The head's dead letter is the lab's own: it is not left for an operator.
    DeadLetter.objects.filter(delivery=head).delete()
    return Blocking(
        len(blocked),
        _mean_ms(waits(blocked)),
        _mean_ms(waits(alone)),
        head.attempts,
        str(outcome),
    )
