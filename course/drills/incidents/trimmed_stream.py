"""Drill: a stream consumer that fell behind the log's retention.

Seeding (in the sandbox): stock corrections run through the library's service and
the ``stock_projection`` consumer applies them. Then the consumer stops (its worker
was left out of a deploy) while the log goes on: more corrections, some for books it
had already projected. The subscriptions keep up, so retention may drop the old
messages; they are a month old (the drill ages them), and the log is trimmed past
the consumer's offset. The consumer stops in the ``trimmed`` state instead of
skipping what it never saw, and its projection shows old shelf counts.

The lever: the Stream consumers admin's **Rewind…** to the start of the kept log,
with **Rebuild the projection**: the projection is emptied and replayed from what
the log keeps. A rewind without the rebuild keeps the rows the consumer built from
the trimmed messages, including counts that changed in the part it never saw.

The checker: the consumer running and caught up, no projection row that disagrees
with its book, and a row for every book the kept log speaks of.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from django.conf import settings
from django.db.models import F, Max
from django.utils import timezone

from course.drills.incidents.common import Findings, Verdict, drain_all, settle
from library.models import Book, StockProjection
from library.services import stock_correct
from messaging.models import OutboxMessage, StreamConsumer
from messaging.registry import STREAM_CONSUMERS
from messaging.services.streams import earliest_offset, log_trim

CONSUMER: Final = "stock_projection"


@contextmanager
def _consumer_stopped() -> Iterator[None]:
    """The consumer's worker is gone: drains move every subscription but it."""
    spec = STREAM_CONSUMERS.pop(CONSUMER)
    try:
        yield
    finally:
        STREAM_CONSUMERS[CONSUMER] = spec


def _groups() -> list[list[int]]:
    """Four groups of four books, spread over the branches."""
    ids = list(
        Book.objects.filter(on_shelf__gte=2).order_by("id").values_list("pk", flat=True)
    )
    step = max(1, len(ids) // 16)
    chosen = ids[::step][:16]
    return [chosen[n::4] for n in range(4)]


def _correct(books: list[int], delta: int) -> None:
    for book in books:
        shelf = Book.objects.values_list("on_shelf", flat=True).get(pk=book)
        stock_correct(book_id=book, on_shelf=max(0, shelf + delta))


def _age(*, seconds: float) -> None:
    """Make every message so far this much older (the drill compresses time)."""
    OutboxMessage.objects.update(
        created_at=F("created_at") - datetime.timedelta(seconds=seconds)
    )


def seed() -> dict[str, str]:
    seen_only, changed_unseen, changed_again, later = _groups()
    _correct(seen_only + changed_unseen + changed_again, -1)
    _age(seconds=10)  # past the consumers' commit grace (streams.STREAM_GRACE)
    drain_all()  # the projection is built up to here
    with _consumer_stopped():
        _correct(changed_unseen + changed_again, -1)
        drain_all()
        trim_upto = OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0
        _correct(changed_again + later, +1)
        drain_all()
    days = settings.MESSAGING_RETENTION_DAYS + 1
    OutboxMessage.objects.filter(id__lte=trim_upto).update(
        created_at=timezone.now() - datetime.timedelta(days=days)
    )
    log_trim()
    _correct(later, +1)  # the log goes on; the consumer stays stopped
    drain_all()
    return {}


# --- the checker -------------------------------------------------------------------


def _kept_books() -> set[int]:
    bodies = OutboxMessage.objects.values_list("body", flat=True)
    return {
        body["book_id"]
        for body in bodies
        if isinstance(body, dict) and isinstance(body.get("book_id"), int)
    }


def _moving() -> bool:
    consumer = StreamConsumer.objects.filter(name=CONSUMER).first()
    if consumer is None or consumer.state == StreamConsumer.State.TRIMMED:
        return False
    newest = OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0
    return consumer.offset < newest


def check() -> Verdict:
    still = settle(_moving)
    found = Findings()
    consumer = StreamConsumer.objects.filter(name=CONSUMER).first()
    state = consumer.state if consumer else "missing"
    found.add(
        state == StreamConsumer.State.OK,
        f"{CONSUMER} is running (state ok).",
        f"{CONSUMER} is {state}: "
        + (
            consumer.last_error if consumer and consumer.last_error else "stopped"
        ).rstrip(".")
        + ".",
    )
    newest = OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0
    offset = consumer.offset if consumer else 0
    found.add(
        offset == newest,
        f"It has applied the log up to its newest message (#{newest}).",
        f"It stands at #{offset}; the log's newest message is #{newest} and the log "
        f"now starts at #{earliest_offset()}.",
    )
    books = dict(Book.objects.values_list("pk", "on_shelf"))
    versions = dict(Book.objects.values_list("pk", "version"))
    wrong = [
        row.book_id
        for row in StockProjection.objects.all()
        if books.get(row.book_id) != row.on_shelf
        or versions.get(row.book_id) != row.book_version
    ]
    found.add(
        not wrong,
        "Every row of the projection agrees with its book's shelf count.",
        f"{len(wrong)} projection row(s) disagree with their book (books "
        f"{', '.join(f'#{b}' for b in sorted(wrong)[:8])}): they were built from "
        "messages the consumer saw before it stopped, and the changes after them "
        "were trimmed unseen.",
    )
    projected = set(StockProjection.objects.values_list("book_id", flat=True))
    missing = sorted(_kept_books() - projected)
    found.add(
        not missing,
        "Every book the kept log speaks of has its row.",
        f"{len(missing)} book(s) of the kept log have no projection row.",
    )
    return found.verdict(settling=still)
