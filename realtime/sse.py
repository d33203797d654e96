"""Server-sent event streams: job progress and a branch's stock events.

A stream is an async generator drained onto the socket by ``realtime.front``,
which serves the stream routes on daphne's event loop before Django's handler: the
generator is a suspended coroutine that holds no database connection (every read
goes through ``realtime.polling.db_call``, a pool of a few threads) and no
thread (Django's handler would keep one per open response; ``realtime.front`` says
why). Past ``REALTIME_MAX_STREAMS`` a process refuses new streams with 503
(``realtime.limits``). When the log moves, the streams of a process share one
read of the new window (``LogWindows``) and each takes its branch's part.

Each stream starts with ``retry:`` (how long a browser waits before reconnecting) and
a comment line, then sends events with durable ids, so a reconnecting client's
``Last-Event-ID`` names a real resume point:

- job progress: the id is the job's ``version``. Only the current state is kept, so
  every ``job`` event carries the whole state and a client behind by any number of
  versions gets one event. An id above the current version is unknown (``reset``
  with the state). A finished job the client already has gets 204 from the view,
  which tells ``EventSource`` to stop reconnecting.
- branch events: the id is the outbox offset. Resuming replays the branch's
  ``loan_issued``/``return_received``/``stock_corrected`` messages after it from the
  log. An id below what retention keeps (``earliest_offset() - 1``) or above the
  head cannot be resumed: ``reset`` carries the branch's full shelf state and the
  head's offset. A client without an id gets that state as a ``state`` event.

A comment heartbeat goes out after a random 1.0-1.2 times
``REALTIME_SSE_HEARTBEAT_S`` without an event, so that intermediaries see traffic
and many streams do not beat in step. When the client goes away the front cancels the
response task: the ``CancelledError`` ends the generator at its current ``await``
and nothing more is written. ``STREAMS.open`` counts running generators.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

from django.conf import settings

from library.models import Branch
from library.selectors.stock import branch_stock_state
from messaging.models import OutboxMessage
from messaging.registry import MessageType
from messaging.services.streams import earliest_offset
from realtime.polling import (
    change_hub,
    counter_add,
    db_call,
    job_read,
    log_head,
    log_newest,
    loop_local,
)

BRANCH_TYPES: Final = (
    MessageType.LOAN_ISSUED.value,
    MessageType.RETURN_RECEIVED.value,
    MessageType.STOCK_CORRECTED.value,
)
REPLAY_BATCH: Final = 200
HEARTBEAT: Final = ": heartbeat\n\n"


@dataclass
class StreamGauge:
    """Streams of this process: running now, and started since it began."""

    open: int = 0
    started: int = 0


STREAMS = StreamGauge()


def retry_ms() -> int:
    return int(getattr(settings, "REALTIME_SSE_RETRY_MS", 2000))


def heartbeat_s() -> float:
    return float(getattr(settings, "REALTIME_SSE_HEARTBEAT_S", 15.0))


def next_heartbeat_s() -> float:
    return heartbeat_s() * random.uniform(1.0, 1.2)


def sse_event(*, data: Any, event: str | None = None, id: int | None = None) -> str:
    """Return one event block; the JSON is written without spaces, on one line."""
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), default=str))
    return "\n".join(lines) + "\n\n"


async def _counted(stream: AsyncIterator[str]) -> AsyncIterator[str]:
    """Wrap a stream: count it open while it runs, count its events.

    An event is counted before it is handed to the server, so a client that has
    read it (and then reads the counters) never finds it missing; a count after
    the yield could also be cancelled by the client's disconnect.
    """
    STREAMS.open += 1
    STREAMS.started += 1
    try:
        async for block in stream:
            if block.startswith("id: "):
                await counter_add(sse_events=1)
            yield block
    finally:
        STREAMS.open -= 1


# --- job progress --------------------------------------------------------------


async def job_stream(
    job_id: uuid.UUID, last_id: int | None, first: dict[str, Any]
) -> AsyncIterator[str]:
    """Count a connection; return the job's event stream.

    ``first`` is the state the view just read. The connection is counted here, in
    the view, before the response's headers go out: a client that closes right
    after them has still been counted.
    """
    await counter_add(sse_connections=1)
    return _counted(_job_events(job_id, last_id, first))


async def _job_events(
    job_id: uuid.UUID, last_id: int | None, job: dict[str, Any]
) -> AsyncIterator[str]:
    yield f"retry: {retry_ms()}\n\n"
    yield HEARTBEAT
    version = int(job["version"])
    if last_id is not None and last_id > version:
        await counter_add(sse_resets=1)
        yield sse_event(
            id=version, event="reset", data={"reason": "unknown id", "job": job}
        )
    elif last_id != version:
        yield sse_event(id=version, event="job", data=job)
    hub = change_hub()
    while not job["finished"]:
        changed = await hub.job_changed(job_id, version, next_heartbeat_s())
        if changed is False:
            yield HEARTBEAT
            continue
        fresh = await db_call(job_read, job_id)
        if fresh is None:  # deleted (pruned) while followed
            yield sse_event(event="gone", data={"id": str(job_id)})
            return
        job, version = fresh, int(fresh["version"])
        yield sse_event(id=version, event="job", data=job)


# --- branch events -------------------------------------------------------------


def _branch_messages(branch_id: int, after: int, upto: int) -> list[dict[str, Any]]:
    rows: Any = (
        OutboxMessage.objects.filter(
            id__gt=after, id__lte=upto, type__in=BRANCH_TYPES, body__branch_id=branch_id
        )
        .order_by("id")
        .values("id", "type", "body")[:REPLAY_BATCH]
    )
    return list(rows)


@dataclass(frozen=True)
class BranchStart:
    """Where a branch stream starts: the log's head, and whether ``after`` is kept."""

    head: int
    resumable: bool
    reason: str


def branch_start(branch_id: int, last_id: int | None) -> BranchStart | None:
    """Return the branch stream's start, or None for an unknown branch (sync)."""
    if not Branch.objects.filter(pk=branch_id).exists():
        return None
    head = log_head()
    if last_id is None:
        return BranchStart(head, False, "no id")
    # Compared with the newest offset, not the readable head: on PostgreSQL the
    # head trails the newest message by the commit grace, and an id in between
    # is a real one the client may hold; its stream waits until it is readable.
    if last_id > log_newest():
        return BranchStart(head, False, "unknown id")
    # The client has everything up to last_id; it can resume if last_id + 1 is kept.
    if last_id + 1 < earliest_offset():
        return BranchStart(head, False, "older than the log keeps")
    return BranchStart(head, True, "")


async def branch_stream(
    branch_id: int, last_id: int | None, start: BranchStart
) -> AsyncIterator[str]:
    """Count a connection (as ``job_stream`` does); return the branch's stream."""
    await counter_add(sse_connections=1)
    return _counted(_branch_events(branch_id, last_id, start))


async def _replay(branch_id: int, after: int, upto: int) -> AsyncIterator[str]:
    """Yield the branch's messages in (after, upto], batch by batch."""
    while after < upto:
        rows = await db_call(_branch_messages, branch_id, after, upto)
        for row in rows:
            yield sse_event(id=row["id"], event=row["type"], data=row["body"])
        if len(rows) < REPLAY_BATCH:
            return
        after = rows[-1]["id"]


# A window holding more messages than this is a catch-up (a stream resumed far
# behind), read by each stream alone, batch by batch; streams in step share one
# read per window. Counted in messages, not offsets: ids on PostgreSQL have gaps.
SHARED_WINDOW: Final = 1000
# Windows kept per process: streams woken by one head move ask within moments.
WINDOWS_KEPT: Final = 8


def _window_messages(after: int, upto: int) -> dict[int, list[str]] | None:
    """Every branch's messages in (after, upto] as event blocks, by branch (sync).

    Formatted here, once, off the event loop: every stream of the branch sends the
    same block, and thousands of streams need not each dump the same JSON. None
    when the window holds more than ``SHARED_WINDOW`` messages: a catch-up, which
    each stream reads for its own branch, batch by batch.
    """
    rows: Any = list(
        OutboxMessage.objects.filter(id__gt=after, id__lte=upto, type__in=BRANCH_TYPES)
        .order_by("id")
        .values("id", "type", "body")[: SHARED_WINDOW + 1]
    )
    if len(rows) > SHARED_WINDOW:
        return None
    found: dict[int, list[str]] = {}
    for row in rows:
        branch = row["body"].get("branch_id") if isinstance(row["body"], dict) else None
        if isinstance(branch, int):
            block = sse_event(id=row["id"], event=row["type"], data=row["body"])
            found.setdefault(branch, []).append(block)
    return found


@dataclass
class LogWindows:
    """One read of each new stretch of the log, shared by the streams of a process.

    When the log's head moves, the change hub wakes every branch stream with the
    same (after, head). The first to ask starts one query for every branch's
    messages in that window; the others await the same read and take their
    branch's part. So one event costs a process one query, not one per stream.
    """

    reads: dict[tuple[int, int], asyncio.Future[dict[int, list[str]] | None]] = field(
        default_factory=dict
    )
    queries: int = 0

    async def window(self, after: int, upto: int) -> dict[int, list[str]] | None:
        """Every branch's blocks of (after, upto], read once for all who ask."""
        key = (after, upto)
        read = self.reads.get(key)
        if read is None:
            read = asyncio.ensure_future(db_call(_window_messages, after, upto))
            self.queries += 1
            self.reads[key] = read
            while len(self.reads) > WINDOWS_KEPT:
                self.reads.pop(next(iter(self.reads)))
        try:
            # Read already (the hub prefetched it): no suspension at all.
            return read.result() if read.done() else await asyncio.shield(read)
        except Exception:
            self.reads.pop(key, None)  # a failed read is not kept for the others
            raise

    async def branch_part(
        self, branch_id: int, after: int, upto: int
    ) -> list[str] | None:
        """The branch's blocks of the window, or None: a catch-up, read alone."""
        rows = await self.window(after, upto)
        return None if rows is None else rows.get(branch_id, [])


_windows: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LogWindows] = (
    weakref.WeakKeyDictionary()
)


def log_windows() -> LogWindows:
    """Return the shared log reads of the running event loop (one per process)."""
    return loop_local(_windows, LogWindows)


async def _moved(branch_id: int, after: int, head: int) -> AsyncIterator[str]:
    """Yield the branch's messages in (after, head]: shared read, or a catch-up."""
    blocks = await log_windows().branch_part(branch_id, after, head)
    if blocks is None:
        async for block in _replay(branch_id, after, head):
            yield block
        return
    for block in blocks:
        yield block


async def _branch_events(
    branch_id: int, last_id: int | None, start: BranchStart
) -> AsyncIterator[str]:
    yield f"retry: {retry_ms()}\n\n"
    yield HEARTBEAT
    after = start.head
    if start.resumable and last_id is not None:
        async for block in _replay(branch_id, last_id, start.head):
            yield block
        after = max(after, last_id)  # an id not readable yet: go on from it
    else:
        state = await db_call(branch_stock_state, branch_id)
        if last_id is None:
            yield sse_event(id=after, event="state", data=state)
        else:
            await counter_add(sse_resets=1)
            yield sse_event(
                id=after, event="reset", data={"reason": start.reason, "state": state}
            )
    hub = change_hub()
    hub.prefetch = log_windows().window
    while True:
        head = await hub.log_moved(after, next_heartbeat_s())
        if head is None:
            yield HEARTBEAT
            continue
        async for block in _moved(branch_id, after, head):
            yield block
        after = head
