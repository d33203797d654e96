"""An independent re-implementation of the streams-vs-queues lab.

Nothing here imports ``course/labs``, and the shape is different on purpose: where the
lab runs a log in real files, this counts. Byte counts come from a hand-written
serializer; retention is offset arithmetic.
"""

from __future__ import annotations

from course.tests.labs.reference import Row

# (type, loan or None, book, member) of the six events
STREAM_EVENTS: list[tuple[str, int | None, int, int]] = [
    ("loan_issued", 1, 1, 1),
    ("loan_issued", 2, 2, 2),
    ("return_received", 1, 1, 1),
    ("loan_issued", 3, 3, 3),
    ("reservation_opened", None, 1, 2),
    ("return_received", 2, 2, 2),
]


SUBSCRIPTIONS = 3


def _compact(kind: str, loan: int | None, book: int, member: int) -> str:
    fields = [f'"type":"{kind}"']
    if loan is not None:
        fields.append(f'"loanId":{loan}')
    fields += [f'"bookId":{book}', f'"memberId":{member}']
    return "{" + ",".join(fields) + "}"


def storage() -> list[Row]:
    one = sum(len((_compact(*e) + "\n").encode()) for e in STREAM_EVENTS)
    return [["single log", 1, one], ["subscription copy", SUBSCRIPTIONS, 3 * one]]


def offsets() -> list[Row]:
    length = len(STREAM_EVENTS)
    rates = {"notification": 6, "stock-summary": 4, "report": 1}
    return [[name, min(rate, length)] for name, rate in rates.items()]


def replay() -> list[Row]:
    written = 6
    # acknowledgement deletes, so the queue has nothing left; the log still has all
    return [["queue", written, written, 0], ["stream", written, written, written]]


def retention(keep: int) -> list[Row]:
    events, report_at = 10, 2
    gone = events - keep if keep < events else 0
    return [[gone, gone, gone - report_at]]


def retention_reads(keep: int) -> list[Row]:
    events, report_at, notification_at = 10, 2, 10
    first_kept = max(0, events - keep)
    after_report: list[object] = (
        [None, "trimmed"]
        if report_at < first_kept
        else [events - report_at, "readable"]
    )
    return [
        ["before trim", "report", report_at, events - report_at, "readable"],
        ["after trim", "notification", notification_at, 0, "readable"],
        ["after trim", "report", report_at, *after_report],
    ]
