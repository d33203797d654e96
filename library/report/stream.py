"""The monthly loan report as a streamed CSV: chunked transfer from an async generator.

``GET /realtime/reports/loans.csv?month=YYYY-MM`` (needs ``jobs.run_report``) answers
at once with the header line and then writes the month's loans as they are read, a
keyset chunk of ``CHUNK_ROWS`` at a time (``sync_to_async`` around one query per
chunk). No Content-Length is sent, so daphne frames the body with chunked transfer
encoding.

The body's last line says how it ended, because the status line cannot any more:

- ``# complete: N rows`` when every row was written; a reader that does not find
  it knows the report is incomplete, whatever cut it;
- ``# error: <reason>; after N rows`` when production failed after the headers
  went out (the status stays 200).

Backpressure. ASGI has no "drained" signal, and daphne's ``send`` hands the bytes
to Twisted's transport at once, so by itself a slow reader would make the server
hold the whole report. Before each chunk ``_writable`` therefore looks up this
request's Twisted transport (by the client address in the scope; same thread, same
loop) and waits while more than ``HIGH_WATER_BYTES`` wait in its buffer. The
socket's kernel send buffer is pinned to ``SEND_BUFFER_BYTES`` too (Linux would
let it grow to 4 MiB). Production runs at the reader's pace and memory stays flat.
Under another server the lookup finds nothing and the wait is skipped.

Disconnect. Django's ASGI handler cancels the response when daphne reports
``http.disconnect``; the cancellation lands in the generator's current ``await``,
so no further chunk is read. Outcomes are counted in the Redis hash
``realtime:reports`` (started, completed, failed, abandoned, rows, and paused: the
times production stopped to wait for a slow reader; the key kept the name it had
while this module was ``realtime.streaming``), written through the library's Redis
client (``library.cache.connection``), and in ``PRODUCTION`` for this process.

``?form=buffered`` builds the same body first and sends it with a Content-Length:
the form the lesson compares against. With ``LAB_ROUTES`` on, ``lab_lines``,
``line_ms`` and ``fail_after`` replace the loans with the lesson's synthetic
lines, paced, optionally failing: the streaming lab's source.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import datetime
import io
import logging
import re
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, Final

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import close_old_connections
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseBase,
    StreamingHttpResponse,
)

from library.cache.connection import cache_redis
from library.models import Loan
from library.permissions import RUN_REPORT, user_may

# The logger and the counters' key keep the names they had in realtime.streaming,
# so the logs and the counters carry on across the move.
log = logging.getLogger("realtime")

CHUNK_ROWS: Final = 1000
HIGH_WATER_BYTES: Final = 256 * 1024
SEND_BUFFER_BYTES: Final = 64 * 1024
DRAIN_POLL_S: Final = 0.005
REPORTS_KEY: Final = "realtime:reports"
COLUMNS: Final = (
    "loan_id",
    "pickup_date",
    "return_date",
    "book_id",
    "title",
    "branch",
    "member_id",
)
MONTH: Final = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
MAX_LAB_LINES: Final = 200_000
MAX_LINE_MS: Final = 10_000

# Per process: what the generators of this process did (tests read it).
PRODUCTION: Counter[str] = Counter()


class ReportParams:
    """The checked query of one report request."""

    def __init__(
        self,
        *,
        start: datetime.date,
        end: datetime.date,
        lab_lines: int | None = None,
        line_ms: int = 0,
        fail_after: int | None = None,
    ) -> None:
        self.start, self.end = start, end
        self.lab_lines, self.line_ms, self.fail_after = lab_lines, line_ms, fail_after


class ReportProductionError(RuntimeError):
    """Producing the report failed after its first bytes were sent."""


def _count(**fields: int) -> None:
    PRODUCTION.update(fields)
    try:
        with cache_redis().pipeline(transaction=False) as pipe:
            for name, value in fields.items():
                pipe.hincrby(REPORTS_KEY, name, value)
            pipe.execute()
    except redis.RedisError as error:
        log.warning("report counters not updated: %s", error)


def month_bounds(text: str) -> tuple[datetime.date, datetime.date]:
    """Return [first day, first day of the next month) of ``YYYY-MM``."""
    found = MONTH.match(text)
    if found is None:
        raise ValueError("month must look like 2026-01")
    year, month = int(found[1]), int(found[2])
    start = datetime.date(year, month, 1)
    end = datetime.date(year + (month == 12), month % 12 + 1, 1)
    return start, end


def _int_arg(request: HttpRequest, name: str, low: int, high: int) -> int | None:
    raw = request.GET.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}")
    return int(raw)


def parse_params(request: HttpRequest) -> ReportParams:
    """Read month and, with lab routes on, the synthetic source's knobs."""
    start, end = month_bounds(request.GET.get("month", ""))
    if not settings.LAB_ROUTES:
        return ReportParams(start=start, end=end)
    return ReportParams(
        start=start,
        end=end,
        lab_lines=_int_arg(request, "lab_lines", 0, MAX_LAB_LINES),
        line_ms=_int_arg(request, "line_ms", 0, MAX_LINE_MS) or 0,
        fail_after=_int_arg(request, "fail_after", 0, MAX_LAB_LINES),
    )


def _loan_chunk(
    start: datetime.date, end: datetime.date, after_id: int, size: int
) -> list[tuple[Any, ...]]:
    close_old_connections()  # a long stream must not reuse a connection that died
    rows = (
        Loan.objects.filter(
            pickup_date__gte=start, pickup_date__lt=end, id__gt=after_id
        )
        .order_by("id")
        .values_list(
            "id",
            "pickup_date",
            "return_date",
            "book_id",
            "book__title",
            "book__branch__name",
            "member_id",
        )[:size]
    )
    return list(rows)


def csv_text(rows: list[tuple[Any, ...]] | list[tuple[str, ...]]) -> str:
    """Return ``rows`` as CSV lines (``\\n`` endings; titles quoted when needed)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        writer.writerow("" if value is None else value for value in row)
    return buffer.getvalue()


def lab_line(index: int) -> str:
    """Return the lesson's synthetic report line number ``index`` (1-based)."""
    return f"{index:02d};branch-{1 + index % 3};loan={40 + index * 3}\n"


async def _loan_chunks(params: ReportParams) -> AsyncIterator[tuple[str, int]]:
    after = 0
    while True:
        rows = await sync_to_async(_loan_chunk)(
            params.start, params.end, after, CHUNK_ROWS
        )
        if not rows:
            return
        after = rows[-1][0]
        yield csv_text(rows), len(rows)


async def _lab_chunks(params: ReportParams) -> AsyncIterator[tuple[str, int]]:
    assert params.lab_lines is not None
    loop = asyncio.get_running_loop()
    started = loop.time()
    for index in range(1, params.lab_lines + 1):
        if params.line_ms:  # line i is due at i * line_ms: sleeps do not add up
            due = started + index * params.line_ms / 1000
            await asyncio.sleep(max(0.0, due - loop.time()))
        if params.fail_after is not None and index > params.fail_after:
            raise ReportProductionError(
                f"report cut off midway; line={params.fail_after}"
            )
        yield lab_line(index), 1


def _transport(scope: dict[str, Any]) -> Any:
    """Return daphne's Twisted transport of this request, or None elsewhere."""
    client = scope.get("client")
    if not client:
        return None
    # Only a reactor already installed (by daphne): importing it would install one.
    reactor: Any = sys.modules.get("twisted.internet.reactor")
    if reactor is None or not getattr(reactor, "running", False):
        return None
    for reader in reactor.getReaders():
        peer = getattr(reader, "client", None)
        if peer is not None and list(peer)[:2] == list(client)[:2]:
            # Left alone, Linux grows a socket's send buffer to 4 MiB: most of a
            # report would sit in the kernel before the producer felt anything.
            with contextlib.suppress(OSError, AttributeError):
                reader.getHandle().setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES
                )
            return reader
    return None


def buffered_bytes(transport: Any) -> int:
    """Return the bytes written to ``transport`` that the kernel has not taken yet."""
    return int(len(transport.dataBuffer) - transport.offset + transport._tempDataLen)


async def _writable(transport: Any) -> None:
    paused = False
    while transport is not None and buffered_bytes(transport) > HIGH_WATER_BYTES:
        if not transport.connected:
            return  # the disconnect is on its way; the cancellation follows
        if not paused:
            # Once per wait, not per poll: it shows (to a lab, to a test in another
            # process) that a slow reader is holding production back.
            paused = True
            _count(paused=1)
        await asyncio.sleep(DRAIN_POLL_S)


async def report_body(
    params: ReportParams, scope: dict[str, Any] | None = None
) -> AsyncIterator[str]:
    """Yield the report: header line, row chunks, and how it ended."""
    transport = _transport(scope or {})
    rows = 0
    _count(started=1)
    if params.lab_lines is None:  # the lesson's synthetic lines have no header
        yield ",".join(COLUMNS) + "\n"
    try:
        source = _lab_chunks if params.lab_lines is not None else _loan_chunks
        async for text, count in source(params):
            await _writable(transport)
            rows += count
            PRODUCTION["rows"] += count
            yield text
    except (asyncio.CancelledError, GeneratorExit):
        _count(abandoned=1, rows=rows)
        log.info("report stream abandoned by its client after %d rows", rows)
        raise
    except Exception as error:
        _count(failed=1, rows=rows)
        log.exception("report stream failed after %d rows", rows)
        reason = str(error).replace("\n", " ")[:200] or type(error).__name__
        yield f"# error: {reason}; after {rows} rows\n"
        return
    _count(completed=1, rows=rows)
    yield f"# complete: {rows} rows\n"


async def loans_csv(request: HttpRequest) -> HttpResponseBase:
    """Stream the month's loans as CSV (``jobs.run_report``); ``form=buffered``
    sends it whole."""
    # The lab's synthetic lines hold no loan data: with lab routes on, anyone may
    # ask for them. The report itself needs the right the report pages ask for
    # (library.report.views): being staff only opens the admin.
    synthetic = settings.LAB_ROUTES and "lab_lines" in request.GET
    user = await request.auser()
    if not synthetic and not user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    # has_perm may read the user's permissions from the database: not on the loop.
    if not synthetic and not await sync_to_async(user_may)(user, RUN_REPORT):
        raise PermissionDenied("the loan report needs the report permission")
    try:
        params = parse_params(request)
    except ValueError as error:
        return HttpResponseBadRequest(
            f"{error}\n", content_type="text/plain; charset=utf-8"
        )
    filename = f"loans-{params.start:%Y-%m}.csv"
    headers = {
        "Content-Disposition": f'attachment; filename="{filename}"',
        "Cache-Control": "no-store",
        # A proxy in front (nginx) would otherwise collect the stream first.
        "X-Accel-Buffering": "no",
    }
    content_type = "text/csv; charset=utf-8"
    if request.GET.get("form") == "buffered":
        body = "".join([part async for part in report_body(params)])
        return HttpResponse(body, content_type=content_type, headers=headers)
    scope: dict[str, Any] = getattr(request, "scope", {})
    return StreamingHttpResponse(
        report_body(params, scope), content_type=content_type, headers=headers
    )
