"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import httpx

from config.processes import WaitTimeout, wait_until
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step
from course.labs.harness.live_http import client_for, daphnes
from course.labs.server_sent_events.model import EVENT_IDS
from course.labs.server_sent_events.params import ServerSentEventsParams
from library.models import Book
from library.services import stock_correct
from realtime.polling import counters_read, log_head

READ_TIMEOUT_S: Final = 15.0


class Wire:
    """What one connection read, kept byte for byte, and its lines as the client
    parses them.

    ``lines()`` hands the events' parser one line at a time (CR LF, LF or CR end a
    line, as the event-stream format allows) while every chunk the socket gave is
    kept in ``received``: the transcript shows all of it, heartbeats and the
    ``retry:`` line included, even lines read past the last event the lab needed.
    """

    def __init__(self) -> None:
        self.received = bytearray()

    def lines(self, chunks: Iterator[bytes]) -> Iterator[str]:
        pending = b""
        for chunk in chunks:
            self.received += chunk
            pending += chunk
            *complete, pending = re.split(rb"\r\n|\n|\r", pending)
            for line in complete:
                yield line.decode("utf-8", errors="replace")

    def transcript(self) -> list[str]:
        """Return every line read, in order; an unfinished last line is marked."""
        text = self.received.decode("utf-8", errors="replace")
        lines = re.split(r"\r\n|\n|\r", text)
        tail = lines.pop()  # "" when the bytes ended with a line end
        if tail:
            lines.append(f"{tail} [cut here, mid-line]")
        return lines


def _events(lines: object, count: int) -> list[dict[str, str]]:
    """Read ``count`` events (blocks with data) from an iterator of lines."""
    found: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    for line in lines:  # type: ignore[attr-defined]
        if line == "":
            if "data" in fields:
                found.append(fields)
                if len(found) == count:
                    return found
            fields = {}
        elif not line.startswith(":") and ": " in line:
            name, value = line.split(": ", 1)
            fields[name] = value
    raise LabError(f"live: the stream ended after {len(found)} of {count} events")


def _wait_closed(client: httpx.Client) -> None:
    def closed() -> bool:
        answer = client.get("/realtime/metrics")
        return bool(answer.json()["process"]["open_streams"] == 0)

    try:
        wait_until(
            closed, "the cut stream to close", timeout=READ_TIMEOUT_S, interval=0.05
        )
    except WaitTimeout:
        raise LabError("live: the server still writes to the cut connection") from None


@dataclass(frozen=True)
class Measurement:
    """Both connections' events, their raw lines, and the server's counters."""

    connections: list[list[dict[str, str]]]
    resumed_from: str  # the Last-Event-ID the second connection sent
    transcripts: list[list[str]]  # each connection's lines, as they came
    before: dict[str, int]
    after: dict[str, int]


def measure(params: ServerSentEventsParams, progress: Progress) -> Measurement:
    """Read the events, cut the stream, miss some, resume with Last-Event-ID."""
    cut = params.cut
    first_count = cut if 0 < cut < len(EVENT_IDS) else len(EVENT_IDS)
    book = Book.objects.order_by("branch_id", "id").first()
    if book is None:
        raise LabError("live: the library has no books; run manage.py seed_library")
    branch = book.branch_id

    def recount() -> None:
        current = Book.objects.get(pk=book.pk).on_shelf
        stock_correct(book_id=book.pk, on_shelf=current)

    url = f"/realtime/branches/{branch}/events"
    start = log_head()
    timeout = httpx.Timeout(30.0, read=READ_TIMEOUT_S)
    # Lab routes on: /realtime/metrics (read by _wait_closed) is otherwise staff only.
    lab_routes = {"LIBRARY_LAB_ROUTES": "on"}
    with (
        daphnes(progress, ["on"], env=lab_routes) as servers,
        client_for(servers[0]) as client,
    ):
        before = counters_read()
        live_step(
            progress,
            0.3,
            f"first connection: {first_count} event{'' if first_count == 1 else 's'}, "
            "then cut",
        )
        headers = {"Last-Event-ID": str(start)}
        wires = [Wire(), Wire()]
        with client.stream("GET", url, headers=headers, timeout=timeout) as response:
            if response.status_code != 200:
                raise LabError(f"live: the stream answered {response.status_code}")
            lines = wires[0].lines(response.iter_bytes())
            first: list[dict[str, str]] = []
            for _ in range(first_count):
                recount()
                first += _events(lines, 1)
        # Written only once the server has seen the cut, so none goes to the old one.
        _wait_closed(client)
        live_step(progress, 0.6, "events written while nobody listens")
        for _ in range(len(EVENT_IDS) - first_count):
            recount()
        last = first[-1]["id"] if first else str(start)
        live_step(progress, 0.7, f"second connection: Last-Event-ID {last}")
        second: list[dict[str, str]] = []
        rest = len(EVENT_IDS) - first_count
        with client.stream(
            "GET", url, headers={"Last-Event-ID": last}, timeout=timeout
        ) as response:
            if rest:
                second = _events(wires[1].lines(response.iter_bytes()), rest)
        after = counters_read()
    connections = [first, second]
    for events in connections:
        kinds = {e.get("event") for e in events}
        if events and kinds != {"stock_corrected"}:
            raise LabError(f"live: unexpected events {sorted(map(str, kinds))}")
        for event in events:
            if json.loads(event["data"]).get("branch_id") != branch:
                raise LabError("live: an event of another branch came on the stream")
    return Measurement(
        connections=connections,
        resumed_from=last,
        transcripts=[wire.transcript() for wire in wires],
        before=dict(before),
        after=dict(after),
    )


def tables(params: ServerSentEventsParams, measured: Measurement) -> Tables:
    """Each connection's events and the last id held; the transcript; the totals."""
    connections = measured.connections
    rows: list[list[Cell]] = []
    received = 0  # the run's events the client holds: the course's ids
    for index, events in enumerate(connections, start=1):
        received += len(events)
        held = int(events[-1]["id"]) if events else int(measured.resumed_from)
        rows.append([index, len(events), held, received])
    before, after = measured.before, measured.after
    return {
        "live_stream": table(
            ["connection", "events", "last_event_id", "events_held"], rows
        ),
        # The raw stream of both connections, one row per line read: the page shows
        # it as a transcript (the lab's ``transcripts``).
        "live_transcript": table(
            ["connection", "line"],
            [
                [index, line]
                for index, transcript in enumerate(measured.transcripts, start=1)
                for line in transcript
            ],
        ),
        "live_totals": table(
            ["connections", "events", "server_connections", "server_events"],
            [
                [
                    len(connections),
                    sum(len(e) for e in connections),
                    after["sse_connections"] - before["sse_connections"],
                    after["sse_events"] - before["sse_events"],
                ]
            ],
        ),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
