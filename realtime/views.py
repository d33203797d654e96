"""Pages whose content arrives over WebSocket; polling and event-stream endpoints."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Final

import redis
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    JsonResponse,
    StreamingHttpResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, render

from jobs.access import jobstatus_readable
from jobs.selectors import jobstatus_get, jobstatus_payload
from library.models import Branch
from realtime.limits import (
    Holder,
    slot_held_by,
    stream_admit,
    streams_open,
)
from realtime.polling import (
    change_hub,
    counter_add,
    counters_read,
    db_call,
    job_read,
    long_poll_limits_ms,
)
from realtime.sse import (
    STREAMS,
    branch_start,
    branch_stream,
    job_stream,
    log_windows,
)

log = logging.getLogger("realtime")


def branch_live(request: HttpRequest, branch_id: int) -> HttpResponse:
    """Render the live shelf page; the counts come over the socket."""
    branch = get_object_or_404(Branch, pk=branch_id)
    if request.session.session_key is None:
        # Presence counts sessions (realtime.presence): an anonymous visitor gets
        # one, so their tabs count once and they count apart from their neighbours
        # behind the same address.
        request.session["live_viewer"] = True
    # The rows as they stand now, so the page is laid out before the socket's first
    # snapshot arrives (it replaces them with the same rows: nothing moves).
    books = branch.books.order_by("id").values("id", "title", "on_shelf")
    return render(request, "realtime/live.html", {"branch": branch, "books": books})


# --- polling and server-sent events (realtime.polling, realtime.sse) -----------------

_ID_DIGITS = 18  # a bigint; longer digit strings are refused, not parsed


def _no_store(response: HttpResponseBase) -> HttpResponseBase:
    # Every answer describes one moment; a stored copy would hide the next change.
    response["Cache-Control"] = "no-store"
    return response


def _bad(message: str, raw: str) -> HttpResponseBase:
    return _no_store(JsonResponse({"error": message, "value": raw[:40]}, status=400))


def _whole(raw: str | None, name: str) -> int | HttpResponseBase | None:
    """Return None when absent, the number, or a 400 answer saying what is wrong."""
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > _ID_DIGITS:
        return _bad(f"{name} must be a whole number (0 or more)", raw)
    return int(raw)


def _method_get(request: HttpRequest) -> HttpResponseBase | None:
    if request.method in ("GET", "HEAD"):
        return None
    return HttpResponseNotAllowed(["GET", "HEAD"])


def _job_readable(request: HttpRequest, job_id: uuid.UUID) -> dict[str, Any] | None:
    """Return the job's payload if the request may read it; None as for no such job.

    Run on the database pool (``db_call``): the request's session and user are read
    here. On a lab server (``LAB_ROUTES``) statuses are open, as the metrics are:
    the labs and benchmarks poll jobs of their own there without signing in.
    """
    job = jobstatus_get(job_id=job_id)
    if job is None or not (settings.LAB_ROUTES or jobstatus_readable(job, request)):
        return None
    return jobstatus_payload(job)


async def job_status_short(request: HttpRequest, job_id: uuid.UUID) -> HttpResponseBase:
    """Short poll: 204 at once while ``?version=`` is current, else the job."""
    if (refused := _method_get(request)) is not None:
        return refused
    version = _whole(request.GET.get("version"), "version")
    if isinstance(version, HttpResponseBase):
        return version
    job = await db_call(_job_readable, request, job_id)
    if job is None:
        return _no_store(JsonResponse({"error": "no such job"}, status=404))
    if version is not None and job["version"] == version:
        await counter_add(short_requests=1, short_empty=1)
        return _no_store(HttpResponse(status=204))
    await counter_add(short_requests=1)
    return _no_store(JsonResponse(job))


async def job_wait(request: HttpRequest, job_id: uuid.UUID) -> HttpResponseBase:
    """Long poll: hold until the job's version differs from ``?version=``.

    A client already behind is answered at once. Otherwise the answer waits up to
    ``?timeout_ms=`` (default and cap from the settings) and is 204 when nothing
    changed. The wait is a sleeping coroutine; ``ChangeHub`` looks for changes.
    """
    if (refused := _method_get(request)) is not None:
        return refused
    version = _whole(request.GET.get("version"), "version")
    if isinstance(version, HttpResponseBase):
        return version
    default_ms, largest_ms = long_poll_limits_ms()
    hold = _whole(request.GET.get("timeout_ms"), "timeout_ms")
    if isinstance(hold, HttpResponseBase):
        return hold
    hold_ms = min(default_ms if hold is None else hold, largest_ms)
    job = await db_call(_job_readable, request, job_id)
    if job is None:
        return _no_store(JsonResponse({"error": "no such job"}, status=404))
    if version is None or job["version"] != version:
        await counter_add(long_requests=1)
        return _no_store(JsonResponse(job))
    slot = stream_admit(_holder(request))
    if isinstance(slot, HttpResponse):
        return slot
    try:
        changed = await change_hub().job_changed(job_id, version, hold_ms / 1000)
    finally:
        slot.release()
    if changed is False:
        await counter_add(long_requests=1, long_empty=1)
        return _no_store(HttpResponse(status=204))
    fresh = None if changed is None else await db_call(job_read, job_id)
    await counter_add(long_requests=1)
    if fresh is None:
        return _no_store(JsonResponse({"error": "no such job"}, status=404))
    return _no_store(JsonResponse(fresh))


def _last_event_id(request: HttpRequest) -> int | HttpResponseBase | None:
    # The header (a reconnecting EventSource) wins over the query (the first
    # connection of a page that knows where it stands: EventSource cannot set it).
    header = request.headers.get("Last-Event-ID")
    if header is not None and header.strip():
        return _whole(header.strip(), "Last-Event-ID")
    return _whole(request.GET.get("lastEventId"), "lastEventId")


def _event_stream(stream: AsyncIterator[str]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        stream, content_type="text/event-stream; charset=utf-8"
    )
    response["Cache-Control"] = "no-store"
    # nginx and similar proxies would otherwise buffer the stream into one piece.
    response["X-Accel-Buffering"] = "no"
    return response


def _holder(request: HttpRequest) -> Holder:
    # The cookie as sent: stream requests read no session (realtime.front), and a
    # forged one only splits its address's share, never enlarges it.
    return Holder.of(
        request.META.get("REMOTE_ADDR"),
        request.COOKIES.get(settings.SESSION_COOKIE_NAME),
    )


async def _admitted(
    request: HttpRequest, opening: Coroutine[Any, Any, AsyncIterator[str]]
) -> HttpResponseBase:
    """Open the stream if this process and client have room, else refuse it."""
    slot = stream_admit(_holder(request))
    if isinstance(slot, HttpResponse):
        opening.close()  # never awaited: closed, or Python warns about it
        return slot
    try:
        stream = await opening
    except BaseException:
        slot.release()
        raise
    return _event_stream(slot_held_by(stream, slot))


async def job_events(request: HttpRequest, job_id: uuid.UUID) -> HttpResponseBase:
    """Job progress as server-sent events (``realtime.sse``)."""
    if (refused := _method_get(request)) is not None:
        return refused
    last_id = _last_event_id(request)
    if isinstance(last_id, HttpResponseBase):
        return last_id
    job = await db_call(_job_readable, request, job_id)
    if job is None:
        return _no_store(JsonResponse({"error": "no such job"}, status=404))
    if job["finished"] and last_id == job["version"]:
        # Nothing will ever follow; 204 stops EventSource from reconnecting.
        return _no_store(HttpResponse(status=204))
    return await _admitted(request, job_stream(job_id, last_id, job))


async def branch_events(request: HttpRequest, branch_id: int) -> HttpResponseBase:
    """A branch's loans, returns and corrections as server-sent events."""
    if (refused := _method_get(request)) is not None:
        return refused
    last_id = _last_event_id(request)
    if isinstance(last_id, HttpResponseBase):
        return last_id
    start = await db_call(branch_start, branch_id, last_id)
    if start is None:
        return _no_store(JsonResponse({"error": "no such branch"}, status=404))
    return await _admitted(request, branch_stream(branch_id, last_id, start))


# How long a client should wait before asking for the metrics again after Redis
# failed to answer: long enough for a restart, short enough for a lab's poll loop.
METRICS_RETRY_AFTER_S: Final = 5


def _counters_or_none() -> dict[str, int] | None:
    """Return the shared counters, or None when Redis does not answer in time."""
    # Short timeouts: a Redis that is down must not hold the request (and a thread).
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=1.0
    )
    try:
        return counters_read(client)
    except (redis.RedisError, OSError):
        log.warning("realtime metrics: counters not readable", exc_info=True)
        return None
    finally:
        client.close()


async def realtime_metrics(request: HttpRequest) -> HttpResponseBase:
    """Counters of every process (Redis) and this process's streams and waiters.

    Staff only: the answer names server pids and load. With lab routes on (only the
    daphnes the labs, tests and benchmarks start) the labs read it signed out.
    """
    if (refused := _method_get(request)) is not None:
        return refused
    if not settings.LAB_ROUTES:
        user = await request.auser()
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not user.is_staff:
            return _no_store(JsonResponse({"error": "staff only"}, status=403))
    counters = await asyncio.to_thread(_counters_or_none)
    if counters is None:
        unavailable = JsonResponse(
            {"error": "Redis is unavailable; the counters cannot be read"}, status=503
        )
        unavailable["Retry-After"] = str(METRICS_RETRY_AFTER_S)
        return _no_store(unavailable)
    hub = change_hub()
    return _no_store(
        JsonResponse(
            {
                "counters": counters,
                "process": {
                    "pid": os.getpid(),
                    "open_streams": STREAMS.open,
                    "streams_started": STREAMS.started,
                    "waiting": hub.waiting,
                    "hub_polls": hub.stats.polls,
                    # Streams and long polls admitted, against the refusal limit.
                    "admitted": streams_open(),
                    # Shared reads of new log windows (one per head move).
                    "log_reads": log_windows().queries,
                    "max_streams": settings.REALTIME_MAX_STREAMS,
                },
            }
        )
    )
