"""Lab for "Streams versus Queues": a log that reading does not shrink.

Model part. The log is a real append-only file in a throwaway directory, one compact
JSON record per line. A record's offset is its position counted from the first record
ever appended, so it stays the same after older records are trimmed. Each consumer
keeps its own offset; reading never changes the file.

1. ``storage`` — six library events stored once in a single log and once copied into
   a file per subscription (three subscriptions). Bytes are the sizes on disk.
2. ``offsets`` — three consumers of that one log read a single round from offset 0,
   at 6, 4 and 1 records per round.
3. ``replay`` — six ``loan_issued`` events, first on a queue that deletes a message
   when it is acknowledged, then on the log. One consumer reads everything; then a
   second consumer asks for the whole history.
4. ``retention`` — ten events; notification has read all of them (offset 10), report
   is at offset 2. The log then keeps only its newest ``keep`` records.
   ``lost_by_report`` is the earliest remaining offset minus report's offset, the
   course's own subtraction: positive, it is the records report can no longer read;
   zero or negative (``keep`` of 8 or more), report still has that much margin.

Only ``retention`` depends on ``keep``; the other tables are the course's constants.
Extra tables: ``lag`` (log length after the round and how far report trails),
``log_head`` (the first lines of the log file), ``replay_state`` (what each model
still holds after the first consumer), ``rewind`` (a consumer moving its offset back
to 3), ``retention_log`` and ``retention_reads`` (the log and each read before and
after the trim).

Live part (``live`` below): storage and replay on the installation's outbox log and
its ``stock_projection`` consumer, retention on a throwaway log, in ``live_`` tables.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    LabError,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)

if TYPE_CHECKING:
    from course.labs.live import LiveSystem

Record = dict[str, str | int]

NOTIFICATION = "notification"
STOCK_SUMMARY = "stock-summary"
REPORT = "report"
CONSUMERS = (NOTIFICATION, STOCK_SUMMARY, REPORT)


def library_event(kind: str, *, book: int, member: int, loan: int = 0) -> Record:
    """Return an event with its keys in the lesson's order; loan 0 means none."""
    record: Record = {"type": kind}
    if loan:
        record["loanId"] = loan
    record["bookId"] = book
    record["memberId"] = member
    return record


# The storage and offsets runs share these six events.
LIBRARY_EVENTS: tuple[Record, ...] = (
    library_event("loan_issued", loan=1, book=1, member=1),
    library_event("loan_issued", loan=2, book=2, member=2),
    library_event("return_received", loan=1, book=1, member=1),
    library_event("loan_issued", loan=3, book=3, member=3),
    library_event("reservation_opened", book=1, member=2),
    library_event("return_received", loan=2, book=2, member=2),
)
# Records each consumer can take in one round of the offsets run.
READ_RATE = {NOTIFICATION: 6, STOCK_SUMMARY: 4, REPORT: 1}
HEAD_LINES = 3

REPLAY_EVENTS = 6
REWIND_TO = 3
READ_LIMIT = 100  # records asked for per read in the replay and retention runs

RETENTION_EVENTS = 10
RETENTION_OFFSETS = {NOTIFICATION: 10, REPORT: 2}


def _line(record: Record) -> str:
    # Compact separators and insertion-ordered keys: the same text as JSON.stringify.
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"


def loan_issued(loan: int) -> Record:
    return {"type": "loan_issued", "loanId": loan}


class Log:
    """An append-only file of records addressed by offset.

    ``earliest`` is the offset of the oldest record still in the file; it only grows,
    and only ``trim`` moves it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.earliest = 0
        path.write_text("", encoding="utf-8")

    def append(self, record: Record) -> None:
        # Opened for appending only: earlier bytes are never rewritten, so a reader
        # going through the file at the same time sees nothing change under it.
        with self.path.open("a", encoding="utf-8") as out:
            out.write(_line(record))

    def extend(self, records: Iterable[Record]) -> None:
        for record in records:
            self.append(record)

    def records(self) -> list[Record]:
        text = self.path.read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line]

    def __len__(self) -> int:
        return len(self.records())

    def read(self, offset: int, count: int) -> list[Record] | None:
        """Return up to ``count`` records from ``offset``; None if it was trimmed."""
        if offset < self.earliest:
            return None
        start = offset - self.earliest
        return self.records()[start : start + count]

    def trim(self, keep: int) -> int:
        """Keep only the newest ``keep`` records; return how many were dropped.

        Retention looks at the log alone, never at where the consumers are.
        """
        kept = self.records()
        dropped = max(0, len(kept) - keep)
        fresh = self.path.with_name(self.path.name + ".trim")
        fresh.write_text("".join(_line(r) for r in kept[dropped:]), encoding="utf-8")
        # Swap the whole file at once: a reader sees the old log or the new one.
        os.replace(fresh, self.path)
        self.earliest += dropped
        return dropped

    @property
    def size(self) -> int:
        return self.path.stat().st_size


class DeletingQueue:
    """A queue whose acknowledgement removes the message: nothing to read twice."""

    def __init__(self) -> None:
        self._messages: deque[Record] = deque()

    def write(self, message: Record) -> None:
        self._messages.append(message)

    def receive(self) -> Record | None:
        return self._messages[0] if self._messages else None

    def acknowledge(self) -> None:
        self._messages.popleft()

    @property
    def depth(self) -> int:
        return len(self._messages)


def storage_and_offsets(
    folder: Path,
) -> tuple[list[list[Cell]], list[list[Cell]], list[Cell], list[list[Cell]]]:
    """Return (storage rows, offset rows, lag row, head lines of the single log)."""
    log = Log(folder / "events.log")
    log.extend(LIBRARY_EVENTS)
    copies = []
    for name in CONSUMERS:
        copy = Log(folder / f"copy-{name}.log")
        copy.extend(LIBRARY_EVENTS)
        copies.append(copy)
    storage: list[list[Cell]] = [
        ["single log", 1, log.size],
        ["subscription copy", len(copies), sum(copy.size for copy in copies)],
    ]
    offsets = dict.fromkeys(CONSUMERS, 0)
    for name in CONSUMERS:
        taken = log.read(offsets[name], READ_RATE[name])
        offsets[name] += len(taken or [])
    length = len(log)
    lag: list[Cell] = [length, length - offsets[REPORT]]
    lines = log.path.read_text(encoding="utf-8").splitlines()
    head: list[list[Cell]] = [[n, line] for n, line in enumerate(lines[:HEAD_LINES])]
    return storage, [[name, offsets[name]] for name in CONSUMERS], lag, head


def replay(
    folder: Path,
) -> tuple[list[list[Cell]], list[list[Cell]], list[Cell]]:
    """Return (replay rows, what each model still holds, the rewind row)."""
    events = [loan_issued(n) for n in range(1, REPLAY_EVENTS + 1)]

    queue = DeletingQueue()
    for event in events:
        queue.write(event)
    seen_by: list[int] = []
    for _consumer in range(2):  # the first consumer, then the one joining later
        seen = 0
        while queue.receive() is not None:
            seen += 1
            queue.acknowledge()
        seen_by.append(seen)
    queue_row: list[Cell] = ["queue", len(events), *seen_by]
    queue_left = queue.depth

    log = Log(folder / "replay.log")
    log.extend(events)
    offset = 0
    for _record in log.read(offset, READ_LIMIT) or []:
        offset += 1  # the offset moves one record at a time, as work completes
    later = len(log.read(0, READ_LIMIT) or [])  # a new consumer starting at zero
    stream_row: list[Cell] = ["stream", len(events), offset, later]

    reread = log.read(REWIND_TO, READ_LIMIT) or []
    first_loan = reread[0]["loanId"] if reread else None
    state: list[list[Cell]] = [["queue", queue_left], ["stream", len(log)]]
    return [queue_row, stream_row], state, [REWIND_TO, len(reread), first_loan]


def _readable(log: Log, offset: int) -> list[Cell]:
    found = log.read(offset, READ_LIMIT)
    if found is None:
        return [None, "trimmed"]
    return [len(found), "readable"]


def retention(
    folder: Path, keep: int
) -> tuple[list[Cell], list[list[Cell]], list[list[Cell]]]:
    """Return (the retention row, log size per stage, reads per stage)."""
    log = Log(folder / "retention.log")
    log.extend(loan_issued(n) for n in range(1, RETENTION_EVENTS + 1))
    report = RETENTION_OFFSETS[REPORT]
    sizes: list[list[Cell]] = [["before trim", len(log), log.earliest]]
    reads: list[list[Cell]] = [["before trim", REPORT, report, *_readable(log, report)]]
    dropped = log.trim(keep)
    sizes.append(["after trim", len(log), log.earliest])
    for name in (NOTIFICATION, REPORT):
        offset = RETENTION_OFFSETS[name]
        reads.append(["after trim", name, offset, *_readable(log, offset)])
    row: list[Cell] = [dropped, log.earliest, log.earliest - report]
    return row, sizes, reads


def model(params: Params, progress: Progress) -> Tables:
    keep = int_param(params, "keep")
    with tempfile.TemporaryDirectory(prefix="streams-vs-queues-") as name:
        folder = Path(name)
        progress(0.05, "storage: one log against a copy per subscription")
        storage, offsets, lag, head = storage_and_offsets(folder)
        progress(0.4, "replay: a later consumer on a queue and on a log")
        replay_rows, replay_state, rewind = replay(folder)
        progress(0.7, f"retention: keep the newest {keep} records")
        kept, retention_log, retention_reads = retention(folder, keep)
    return {
        "storage": table(["model", "files", "bytes"], storage),
        "offsets": table(["consumer", "offset"], offsets),
        "replay": table(
            ["model", "written", "first_consumer", "later_consumer"], replay_rows
        ),
        "retention": table(["dropped", "earliest_offset", "lost_by_report"], [kept]),
        "lag": table(["log_records", "report_behind"], [lag]),
        "log_head": table(["offset", "line"], head),
        "replay_state": table(["model", "records_left"], replay_state),
        "rewind": table(["rewound_to", "reread", "first_loan"], [rewind]),
        "retention_log": table(["stage", "records", "earliest_offset"], retention_log),
        "retention_reads": table(
            ["stage", "consumer", "offset", "readable", "state"], retention_reads
        ),
    }


# --- live part ---------------------------------------------------------------------

LIVE_EVENTS = len(LIBRARY_EVENTS)
STREAM = "stock_projection"


def live(params: Params, progress: Progress) -> Tables:
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
    from course.labs import live as harness
    from course.labs import live_streams as helpers
    from messaging.models import StreamConsumer

    keep = int_param(params, "keep")
    if keep < 1:
        raise LabError(
            "live: the system keeps at least 1 message "
            "(MESSAGING_RETENTION_MESSAGES >= 1); use keep >= 1 with --live"
        )
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
    harness.live_step(progress, 0.8, f"retention: keep {keep}, on a throwaway log")
    retention, reads = _live_retention(keep)
    return {
        "live_storage": table(["model", "messages", "copies", "bytes"], storage),
        "live_replay": table(
            [
                "step",
                "rewound_to",
                "read",
                "projected_books",
                "equal_to_books",
                "changed_rows",
            ],
            replay,
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
    from messaging.models import StreamConsumer

    row = StreamConsumer.objects.filter(name=STREAM).values_list("offset", flat=True)
    return int(row.first() or 0)


def _live_storage(ids: list[int]) -> list[list[Cell]]:
    from course.labs.live_streams import body_bytes
    from messaging.models import Delivery, OutboxMessage

    sizes = dict(OutboxMessage.objects.filter(pk__in=ids).values_list("id", "body"))
    copies = list(
        Delivery.objects.filter(message_id__in=ids).values_list("message_id", flat=True)
    )
    log_bytes = sum(body_bytes(body) for body in sizes.values())
    copy_bytes = sum(body_bytes(sizes[message_id]) for message_id in copies)
    return [
        ["single log", len(ids), len(sizes), log_bytes],
        ["subscription copies", len(ids), len(copies), copy_bytes],
    ]


def _projection() -> dict[int, tuple[int, int]]:
    from library.models import StockProjection

    rows = StockProjection.objects.values_list("book_id", "on_shelf", "book_version")
    return {book: (on_shelf, version) for book, on_shelf, version in rows}


def _projection_row(
    step: str,
    rewound_to: int | None,
    read: int | None,
    before: dict[int, tuple[int, int]],
) -> list[Cell]:
    from library.models import Book

    now = _projection()
    shelves = dict(Book.objects.filter(pk__in=list(now)).values_list("id", "on_shelf"))
    equal = sum(
        1 for book, (on_shelf, _) in now.items() if shelves.get(book) == on_shelf
    )
    changed = sum(
        1 for book in set(now) | set(before) if now.get(book) != before.get(book)
    )
    return [step, rewound_to, read, len(now), equal, changed]


def _replay_to(system: LiveSystem, offset: int, *, rebuild: bool) -> int:
    """Rewind the consumer, wait until it is back at the head; return what it read."""
    from django.db.models import Max

    from course.labs import live as harness
    from messaging.models import OutboxMessage, StreamConsumer
    from messaging.streams import stream_rewind

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


def _live_replay(system: LiveSystem, ids: list[int]) -> list[list[Cell]]:
    from messaging.streams import earliest_offset

    before = _projection()
    rows = [_projection_row("live consumer, caught up", None, None, before)]
    third = ids[REWIND_TO - 1]
    read = _replay_to(system, third, rebuild=False)
    rows.append(
        _projection_row(f"rewound to {third} (before the 4th)", third, read, before)
    )
    start = earliest_offset() - 1
    if start > 0:
        rows.append(
            [
                f"rebuild not run: the log starts at {start + 1}",
                None,
                None,
                None,
                None,
                None,
            ]
        )
        return rows
    read = _replay_to(system, start, rebuild=True)
    rows.append(_projection_row("rewound to 0 with rebuild", start, read, before))
    return rows


def _live_retention(keep: int) -> tuple[list[Cell], list[list[Cell]]]:
    from course.labs.live_streams import retention_in_throwaway

    found = retention_in_throwaway(
        keep=keep, events=RETENTION_EVENTS, lagging_at=RETENTION_OFFSETS[REPORT]
    )
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


LAB = Lab(
    slug="streams-vs-queues",
    title="Streams versus Queues",
    params=(
        Param(
            "keep",
            "int",
            4,
            "newest records the retention rule keeps (the log holds 10)",
            minimum=0,
            maximum=1_000_000,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="storage",
            label="model",
            values=("bytes",),
            title="Bytes on disk for the same six events",
            unit="bytes",
        ),
        Chart(
            table="offsets",
            label="consumer",
            values=("offset",),
            title="Where each consumer stands after one round",
            unit="records",
        ),
        Chart(
            table="replay",
            label="model",
            values=("first_consumer", "later_consumer"),
            title="Records the first and a later consumer can read",
            unit="records",
        ),
    ),
)
