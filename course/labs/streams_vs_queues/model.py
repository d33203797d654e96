"""The model part of the streams-vs-queues lab: an in-memory append-only log with
per-consumer offsets against a queue that deletes on read.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from course.labs.harness.base import Cell, Progress, Tables, table
from course.labs.streams_vs_queues.params import StreamsVsQueuesParams

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

    ``earliest`` is where the file now begins (older records were trimmed); it only
    grows, and only ``trim`` moves it.
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


def model(params: StreamsVsQueuesParams, progress: Progress) -> Tables:
    keep = params.keep
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
