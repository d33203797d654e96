"""How many streams, long polls and sockets a server process holds, and for whom.

Each open event stream or long poll costs a socket (a file descriptor) and some
memory for as long as it lasts. Past ``REALTIME_MAX_STREAMS`` a process answers
503 with ``Retry-After`` instead of accepting one more, so a crowd of clients is
spread by the balancer and by the clients' retries rather than taking the process
down with "too many open files".

That bound alone let one client take every place. So each client also has a share
(``Places``): streams and long polls per client address and per session
(``REALTIME_STREAMS_PER_CLIENT``, ``REALTIME_STREAMS_PER_SESSION``), live-shelf
sockets the same (``REALTIME_SOCKETS_PER_CLIENT``, ``REALTIME_SOCKETS_PER_SESSION``);
0 turns a share off. Past its share a stream is answered 429, a socket closed with
``CLOSE_TOO_MANY``. The address is the one daphne saw (the balancer's
``X-Forwarded-For`` with ``--proxy-headers``); the session is the session cookie
(for a socket, the session the authentication middleware found valid). A stream
request with a forged cookie gets a session share of its own, but never more than
its address's.

Every count is per process: every request of a daphne runs on its one event loop,
so plain integers need no lock, and nothing is lost when a process dies.
"""

from __future__ import annotations

import hashlib
import logging
import resource
import weakref
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

from django.conf import settings
from django.http import HttpResponse

log = logging.getLogger("realtime")

# Descriptors a process needs besides its streams: database and Redis connections,
# log files, the listening socket, Python's own.
SPARE_DESCRIPTORS: Final = 200
# A refused client should come back soon, but not all in the same second.
RETRY_AFTER_S: Final = 5


# A socket past its client's share is closed with this code (HTTP's 429 in the
# application range daphne lets through, as 4009 and 4404 are).
CLOSE_TOO_MANY: Final = 4429


@dataclass(frozen=True)
class Holder:
    """Who opens a connection: the client's address and its session, if any."""

    address: str
    session: str | None  # a digest of the session key, never the key itself

    @classmethod
    def of(cls, address: str | None, session_key: str | None) -> Holder:
        digest = (
            hashlib.sha256(session_key.encode()).hexdigest()[:32]
            if session_key
            else None
        )
        return cls(address or "unknown", digest)


@dataclass
class Places:
    """Connections of one kind held per client address and per session."""

    kind: str
    client_setting: str
    session_setting: str
    by_address: Counter[str] = field(default_factory=Counter)
    by_session: Counter[str] = field(default_factory=Counter)
    # Holders being refused, said once per stretch of refusals, not per attempt. A
    # holder leaves it when it gives a place back, so it holds only holders at
    # their share now, never every client ever refused.
    refusing: set[str] = field(default_factory=set)

    def take(self, holder: Holder) -> Place | None:
        """Take a place for ``holder``, or None when its share is used up."""
        over = self._over(holder)
        if over is not None:
            who, setting, share = over
            if who not in self.refusing:
                self.refusing.add(who)
                log.warning(
                    "refusing %s of %s: %s reached (%s)", self.kind, who, setting, share
                )
            return None
        self.by_address[holder.address] += 1
        if holder.session is not None:
            self.by_session[holder.session] += 1
        return Place(self, holder)

    def give_back(self, holder: Holder) -> None:
        _decrement(self.by_address, holder.address)
        self.refusing.discard(f"address {holder.address}")
        if holder.session is not None:
            _decrement(self.by_session, holder.session)
            self.refusing.discard(f"session {holder.session[:8]}")

    def _over(self, holder: Holder) -> tuple[str, str, int] | None:
        """Return whose share ``holder`` has used up, the setting and its value."""
        per_address = int(getattr(settings, self.client_setting))
        if per_address and self.by_address[holder.address] >= per_address:
            return f"address {holder.address}", self.client_setting, per_address
        per_session = int(getattr(settings, self.session_setting))
        if (
            holder.session is not None
            and per_session
            and self.by_session[holder.session] >= per_session
        ):
            return f"session {holder.session[:8]}", self.session_setting, per_session
        return None


def _decrement(counts: Counter[str], key: str) -> None:
    # Emptied entries go, so a process that saw a million clients keeps none of them.
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]


class Place:
    """One admitted connection; ``release`` gives its places back (once, however
    called)."""

    def __init__(self, places: Places, holder: Holder) -> None:
        self.places, self.holder = places, holder
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self.places.give_back(self.holder)


STREAM_PLACES = Places(
    "streams", "REALTIME_STREAMS_PER_CLIENT", "REALTIME_STREAMS_PER_SESSION"
)
SOCKET_PLACES = Places(
    "sockets", "REALTIME_SOCKETS_PER_CLIENT", "REALTIME_SOCKETS_PER_SESSION"
)


@dataclass
class _Slots:
    open: int = 0
    refusing: bool = False  # said once per stretch of refusals, not per client


_slots = _Slots()


class StreamSlot:
    """One admitted stream; ``release`` gives the place back (once, however called)."""

    def __init__(self, place: Place) -> None:
        self._held = True
        self._place = place

    def release(self) -> None:
        if self._held:
            self._held = False
            _slots.open -= 1
            self._place.release()


def streams_open() -> int:
    """Return how many streams and long polls this process holds now."""
    return _slots.open


def stream_admit(holder: Holder) -> StreamSlot | HttpResponse:
    """Take a place for one more stream of ``holder``, or return the refusal.

    503 when the process is full (another process may have room), 429 when the
    holder's share is used up (no process should give it more).
    """
    if _slots.open >= settings.REALTIME_MAX_STREAMS:
        if not _slots.refusing:
            _slots.refusing = True
            log.warning(
                "refusing streams: %s open, REALTIME_MAX_STREAMS reached", _slots.open
            )
        return _refusal(
            503, "This server holds as many live streams as it may; try again shortly."
        )
    place = STREAM_PLACES.take(holder)
    if place is None:
        return _refusal(
            429,
            "Too many live streams are open from this address or session; "
            "close one and try again.",
        )
    _slots.refusing = False
    _slots.open += 1
    return StreamSlot(place)


def _refusal(status: int, text: str) -> HttpResponse:
    """A refusal: its status, and when to try again."""
    response = HttpResponse(
        text + "\n", status=status, content_type="text/plain; charset=utf-8"
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
