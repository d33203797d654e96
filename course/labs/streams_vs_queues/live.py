"""The live part of the streams-vs-queues lab: storage, replay and retention on the
real outbox, its subscription copies and a real Redis stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import Max

from course.labs.harness import live as harness
from course.labs.harness import live_streams as helpers
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    table,
)
from course.labs.harness.live_streams import body_bytes, retention_in_throwaway
from course.labs.streams_vs_queues.model import (
    LIBRARY_EVENTS,
    REPORT,
    RETENTION_EVENTS,
    RETENTION_OFFSETS,
    REWIND_TO,
)
from course.labs.streams_vs_queues.params import StreamsVsQueuesParams
from library.models import Book, StockProjection
from messaging.models import Delivery, OutboxMessage, StreamConsumer
from messaging.services.streams import earliest_offset, stream_rewind

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem

# --- live part ---------------------------------------------------------------------

LIVE_EVENTS = len(LIBRARY_EVENTS)
STREAM = "stock_projection"


def live_check(params: StreamsVsQueuesParams) -> str | None:
    """Refuse keeping nothing: the system keeps at least one message."""
    if params.keep < 1:
        return (
            "live: the system keeps at least 1 message "
            "(MESSAGING_RETENTION_MESSAGES >= 1); use keep >= 1 with --live"
        )
    return None


@dataclass(frozen=True)
class Storage:
    """The six events as stored: once in the log, once per subscription copy."""

    messages: int
    log_records: int
    log_bytes: int
    copies: int
    copy_bytes: int


@dataclass(frozen=True)
class ReplayStep:
    """The projection after one step; None throughout for a step not run."""

    step: str
    rewound_to: int | None
    read: int | None
    projected_books: int | None
    equal_to_books: int | None
    changed_rows: int | None


@dataclass(frozen=True)
class Measurement:
    storage: Storage
    replay: list[ReplayStep]
    retention: dict[str, Any]  # what the throwaway log's child reported


def measure(params: StreamsVsQueuesParams, progress: Progress) -> Measurement:
    """Ask the outbox log, its subscriptions and the ``stock_projection`` consumer.

    1. ``live_storage`` — six library events (stock-takes that find each of up to
       three books' shelf count as it is: ``stock_correct`` to the same count) go
       through the real outbox and relay. The log holds each once; the subscriptions
       hold a ``Delivery`` row each. Bytes are the UTF-8 length of each body's compact
       JSON (the course's ``JSON.stringify``), once per log record and once per copy,
       as a topic that carried the message in each copy would store it. (This
       system's ``Delivery`` rows point at the log row instead of carrying the body;
       the copies it saves are the bodies, not the rows.)
    2. ``live_replay`` — the consumer, caught up, is rewound to before the fourth of
       the six (no rebuild: it reads again and changes nothing, its handler keeps
       the newest book version), then to the log's start with a rebuild: the
       projection is emptied and rebuilt from the log alone by the real workers,
       and must equal the live books' ``on_shelf`` and the projection it replaced.
       ``read`` is how many messages the consumer read to catch up again. If the
       log was trimmed, a rebuild would lose the books last changed before the trim,
       so it is not run on this installation (the row says so).
    3. ``live_retention`` — ``log_trim`` deletes a prefix of the whole log, so it is
       never run on this installation's log. A child ``manage.py`` process runs the
       lesson's experiment on a throwaway SQLite file with
       ``MESSAGING_RETENTION_MESSAGES=keep`` in its environment: ten probes, their
       ``lab_probe`` copies all done (the caught-up reader), ``stock_projection``
       at offset 2, then the trim. Offsets there start at 1, so ``log_starts_at``
       7 is the course's earliest offset 6, and ``lost_by_consumer`` is
       ``log_starts_at - 1 - consumer_offset``: the course's 4. The consumer is not
       moved past the hole; it stops in the ``trimmed`` state.
    """
    consumer = StreamConsumer.objects.filter(name=STREAM).first()
    if consumer is not None and consumer.state == StreamConsumer.State.TRIMMED:
        raise LabError(
            f"live: the {STREAM} consumer stopped at a trimmed offset; rewind it in "
            "the admin (Stream consumers) first"
        )
    books = helpers.recount_books()
    run = harness.new_run_id()
    with harness.live_system(run=run, progress=progress) as system:
        harness.live_step(progress, 0.1, "storage: six events, one log, their copies")
        ids = helpers.stock_recount(books, LIVE_EVENTS)
        harness.wait_until(
            lambda: helpers.copies_settled(ids) and _stream_offset() >= ids[-1],
            what="the six events' copies and the stream consumer",
            timeout=30,
            system=system,
        )
        storage = _live_storage(ids)
        harness.live_step(progress, 0.4, "replay: rewind the stock projection")
        replay = _live_replay(system, ids)
    keep = params.keep
    harness.live_step(progress, 0.8, f"retention: keep {keep}, on a throwaway log")
    return Measurement(storage, replay, live_retention(keep))


def tables(params: StreamsVsQueuesParams, measured: Measurement) -> Tables:
    """Storage, replay and retention, in the model's columns."""
    storage = measured.storage
    retention, reads = retention_rows(measured.retention)
    return {
        "live_storage": table(
            ["model", "messages", "copies", "bytes"],
            [
                [
                    "single log",
                    storage.messages,
                    storage.log_records,
                    storage.log_bytes,
                ],
                [
                    "subscription copies",
                    storage.messages,
                    storage.copies,
                    storage.copy_bytes,
                ],
            ],
        ),
        "live_replay": table(
            [
                "step",
                "rewound_to",
                "read",
                "projected_books",
                "equal_to_books",
                "changed_rows",
            ],
            [
                [
                    step.step,
                    step.rewound_to,
                    step.read,
                    step.projected_books,
                    step.equal_to_books,
                    step.changed_rows,
                ]
                for step in measured.replay
            ],
        ),
        "live_retention": table(
            [
                "dropped",
                "log_starts_at",
                "consumer_offset",
                "lost_by_consumer",
                "state",
            ],
            [retention],
        ),
        "live_retention_reads": table(
            ["stage", "log_records", "log_starts_at", "offset", "readable", "state"],
            reads,
        ),
    }


def _stream_offset() -> int:

    row = StreamConsumer.objects.filter(name=STREAM).values_list("offset", flat=True)
    return int(row.first() or 0)


def _live_storage(ids: list[int]) -> Storage:

    sizes = dict(OutboxMessage.objects.filter(pk__in=ids).values_list("id", "body"))
    copies = list(
        Delivery.objects.filter(message_id__in=ids).values_list("message_id", flat=True)
    )
    log_bytes = sum(body_bytes(body) for body in sizes.values())
    copy_bytes = sum(body_bytes(sizes[message_id]) for message_id in copies)
    return Storage(len(ids), len(sizes), log_bytes, len(copies), copy_bytes)


def _projection() -> dict[int, tuple[int, int]]:

    rows = StockProjection.objects.values_list("book_id", "on_shelf", "book_version")
    return {book: (on_shelf, version) for book, on_shelf, version in rows}


def _projection_row(
    step: str,
    rewound_to: int | None,
    read: int | None,
    before: dict[int, tuple[int, int]],
) -> ReplayStep:

    now = _projection()
    shelves = dict(Book.objects.filter(pk__in=list(now)).values_list("id", "on_shelf"))
    equal = sum(
        1 for book, (on_shelf, _) in now.items() if shelves.get(book) == on_shelf
    )
    changed = sum(
        1 for book in set(now) | set(before) if now.get(book) != before.get(book)
    )
    return ReplayStep(step, rewound_to, read, len(now), equal, changed)


def _replay_to(system: LiveSystem, offset: int, *, rebuild: bool) -> int:
    """Rewind the consumer, wait until it is back at the head; return what it read."""

    def applied() -> int:
        row = StreamConsumer.objects.values_list("applied_total", flat=True)
        return int(row.get(name=STREAM))

    head = int(OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0)
    start = applied()
    stream_rewind(STREAM, offset=offset, rebuild=rebuild)
    harness.wait_until(
        lambda: _stream_offset() >= head,
        what=f"the replay of {STREAM} from offset {offset}",
        timeout=30 + (head - offset) / 100,
        system=system,
    )
    return applied() - start


def _live_replay(system: LiveSystem, ids: list[int]) -> list[ReplayStep]:

    before = _projection()
    rows = [_projection_row("live consumer, caught up", None, None, before)]
    third = ids[REWIND_TO - 1]
    read = _replay_to(system, third, rebuild=False)
    rows.append(
        _projection_row(f"rewound to {third} (before the 4th)", third, read, before)
    )
    start = earliest_offset() - 1
    if start > 0:
        not_run = f"rebuild not run: the log starts at {start + 1}"
        rows.append(ReplayStep(not_run, None, None, None, None, None))
        return rows
    read = _replay_to(system, start, rebuild=True)
    rows.append(_projection_row("rewound to 0 with rebuild", start, read, before))
    return rows


def live_retention(keep: int) -> dict[str, Any]:
    """Run the retention experiment on a throwaway log; return what it reported."""
    found: dict[str, Any] = retention_in_throwaway(
        keep=keep, events=RETENTION_EVENTS, lagging_at=RETENTION_OFFSETS[REPORT]
    )
    return found


def retention_rows(found: dict[str, Any]) -> tuple[list[Cell], list[list[Cell]]]:
    """Return the ``live_retention`` row and the reads before and after the trim."""
    before, after = found["before"], found["after"]
    lost = after["starts_at"] - 1 - after["offset"]
    row: list[Cell] = [
        found["trimmed"],
        after["starts_at"],
        after["offset"],
        lost,
        after["state"],
    ]
    reads: list[list[Cell]] = []
    stages = (
        ("before trim", before),
        ("after trim", after),
        ("consumer moves on", found["advanced"]),
    )
    for stage, state in stages:
        trimmed = state["offset"] + 1 < state["starts_at"]
        reads.append(
            [
                stage,
                state["log"],
                state["starts_at"],
                state["offset"],
                None if trimmed else state["readable"],
                state["state"],
            ]
        )
    return row, reads


LIVE = LivePart(check=live_check, measure=measure, tables=tables)
