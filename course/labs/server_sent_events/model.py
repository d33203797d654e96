"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.server_sent_events.params import ServerSentEventsParams

EVENT_IDS: Final = (1, 2, 3, 4, 5, 6)


@dataclass(frozen=True)
class Connection:
    events: list[int]
    last_event_id: int


def connect(last_event_id: int, cut: int) -> Connection:
    """Return what one connection to ``sse.mjs`` carries (cut 0: no cut)."""
    sent: list[int] = []
    for event_id in EVENT_IDS:
        if event_id <= last_event_id:
            continue
        if cut and len(sent) == cut:
            break
        sent.append(event_id)
    return Connection(sent, sent[-1] if sent else last_event_id)


def model(params: ServerSentEventsParams, progress: Progress) -> Tables:
    cut = params.cut
    progress(0.2, "first connection, cut by the server")
    first = connect(0, cut)
    progress(0.5, "second connection, resumed with Last-Event-ID")
    second = connect(first.last_event_id, 0)
    rows: list[list[Cell]] = [
        [index, len(c.events), c.last_event_id]
        for index, c in enumerate((first, second), start=1)
    ]
    return {
        "stream": table(["connection", "events", "last_event_id"], rows),
        "totals": table(
            ["connections", "events"], [[2, len(first.events) + len(second.events)]]
        ),
    }
