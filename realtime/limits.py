"""How many streams and long polls one server process holds open, and what it refuses.

Each open event stream or long poll costs a socket (a file descriptor) and some
memory for as long as it lasts. Past ``REALTIME_MAX_STREAMS`` a process answers
503 with ``Retry-After`` instead of accepting one more, so a crowd of clients is
spread by the balancer and by the clients' retries rather than taking the process
down with "too many open files". The count is per process: every request of a
daphne runs on its one event loop, so a plain integer needs no lock.
"""

from __future__ import annotations

import logging
import resource
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

from django.conf import settings
from django.http import HttpResponse

log = logging.getLogger("realtime")

# Descriptors a process needs besides its streams: database and Redis connections,
# log files, the listening socket, Python's own.
SPARE_DESCRIPTORS: Final = 200
# A refused client should come back soon, but not all in the same second.
RETRY_AFTER_S: Final = 5


@dataclass
class _Slots:
    open: int = 0
    refusing: bool = False  # said once per stretch of refusals, not per client


_slots = _Slots()


class StreamSlot:
    """One admitted stream; ``release`` gives the place back (once, however called)."""

    def __init__(self) -> None:
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            _slots.open -= 1


def streams_open() -> int:
    """Return how many streams and long polls this process holds now."""
    return _slots.open


def stream_admit() -> StreamSlot | None:
    """Take a place for one more stream, or None when the process is full."""
    if _slots.open >= settings.REALTIME_MAX_STREAMS:
        if not _slots.refusing:
            _slots.refusing = True
            log.warning(
                "refusing streams: %s open, REALTIME_MAX_STREAMS reached", _slots.open
            )
        return None
    _slots.refusing = False
    _slots.open += 1
    return StreamSlot()


def stream_refusal() -> HttpResponse:
    """The answer past the maximum: 503, and when to try again."""
    response = HttpResponse(
        "This server holds as many live streams as it may; try again shortly.\n",
        status=503,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    # A refusal by design, said once by stream_admit: Django would otherwise log
    # every one of a crowd's 503s as a server error.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def slot_held_by(stream: AsyncIterator[str], slot: StreamSlot) -> AsyncIterator[str]:
    """Wrap ``stream`` so its slot is released when it ends, fails or is dropped.

    A response whose body is never started (the client left first) never runs the
    generator's ``finally``; the finalizer on the wrapper covers that case.
    """

    async def held() -> AsyncIterator[str]:
        try:
            async for chunk in stream:
                yield chunk
        finally:
            slot.release()

    wrapper = held()
    weakref.finalize(wrapper, slot.release)
    return wrapper


def descriptor_report() -> str | None:
    """Raise the soft open-files limit as far as allowed; say if it is still too low.

    Returns the warning (also logged) when ``ulimit -n`` cannot hold the configured
    maximum of streams plus the process's other descriptors, None when it can.
    """
    needed = settings.REALTIME_MAX_STREAMS + SPARE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    warning = (
        f"open-files limit (ulimit -n) is {soft}, below the {needed} descriptors "
        f"that REALTIME_MAX_STREAMS={settings.REALTIME_MAX_STREAMS} needs (plus "
        f"{SPARE_DESCRIPTORS} spare): raise the limit or lower the setting"
    )
    log.warning(warning)
    return warning
