"""A lease lock in Redis: the right to run a scheduled task, for a bounded time.

- Acquisition is one ``SET key token NX PX lease``: the existence check and the write
  are a single command, so two processes asking at once cannot both get it.
- The token is unique per acquisition (host, pid, random), and release and renewal
  are Lua scripts that compare it before touching the key: a holder whose lease ran
  out and was taken over cannot delete or extend the new holder's lease.
- The key expires by itself, so a holder that crashed blocks the task for at most one
  lease. A holder that runs long renews the lease from a background thread; if a
  renewal finds the lease gone, ``lost`` is set and the work should stop.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

from redis import Redis

log = logging.getLogger("jobs.locks")

KEY_PREFIX = "lease:"

# KEYS[1] the lock, ARGV[1] the caller's token.
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""
# KEYS[1] the lock, ARGV[1] the caller's token, ARGV[2] the new lease in ms.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""


def new_owner_token() -> str:
    """Return a token naming this acquisition: readable host and pid, unique suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lock_key(name: str) -> str:
    return f"{KEY_PREFIX}{name}"


@dataclass(frozen=True)
class LeaseHolder:
    owner: str
    expires_at: datetime.datetime  # UTC; computed from Redis's remaining time


def lease_holder(
    redis: Redis, name: str, *, now: datetime.datetime
) -> LeaseHolder | None:
    """Return who holds the lease ``name`` and until when; None when it is free."""
    with redis.pipeline(transaction=True) as pipe:
        pipe.get(lock_key(name))
        pipe.pttl(lock_key(name))
        owner, remaining_ms = pipe.execute()
    if owner is None or remaining_ms < 0:
        return None
    text = owner.decode() if isinstance(owner, bytes) else str(owner)
    return LeaseHolder(text, now + datetime.timedelta(milliseconds=remaining_ms))


class LeaseLock:
    """One acquisition attempt of the lease ``name``; a context manager when held."""

    def __init__(
        self, redis: Redis, name: str, *, lease_ms: int, owner: str | None = None
    ) -> None:
        if lease_ms < 1:
            raise ValueError("a lease lasts at least 1 ms")
        self.redis = redis
        self.name = name
        self.key = lock_key(name)
        self.lease_ms = lease_ms
        self.owner = owner or new_owner_token()
        self.lost = threading.Event()
        self._stop_renewing = threading.Event()
        self._renewer: threading.Thread | None = None

    def acquire(self) -> bool:
        """Take the lease if nobody holds it; return whether this caller got it."""
        return bool(self.redis.set(self.key, self.owner, nx=True, px=self.lease_ms))

    def renew(self) -> bool:
        """Extend the lease to a full term if this caller still holds it."""
        renewed = bool(
            self.redis.eval(_RENEW, 1, self.key, self.owner, str(self.lease_ms))
        )
        if not renewed:
            self.lost.set()
        return renewed

    def release(self) -> bool:
        """Delete the lease if this caller still holds it; return whether it did."""
        self._stop_renewing.set()
        if (
            self._renewer is not None
            and self._renewer is not threading.current_thread()
        ):
            self._renewer.join()
        return bool(self.redis.eval(_RELEASE, 1, self.key, self.owner))

    def start_renewing(self) -> None:
        """Renew every third of the lease from a daemon thread until released."""
        self._renewer = threading.Thread(
            target=self._renew_loop, name=f"lease-renew-{self.name}", daemon=True
        )
        self._renewer.start()

    def _renew_loop(self) -> None:
        interval = self.lease_ms / 3000
        while not self._stop_renewing.wait(interval):
            try:
                if not self.renew():
                    log.warning("lease %s lost by %s", self.name, self.owner)
                    return
            except Exception:  # Redis unreachable: the lease may run out
                log.exception("lease %s: renewal failed", self.name)

    def __enter__(self) -> LeaseLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


@contextmanager
def lease(
    redis: Redis, name: str, *, lease_ms: int, renew: bool = True
) -> Iterator[LeaseLock | None]:
    """Hold the lease ``name`` for the block; yield None when someone else holds it.

    The release sits in ``finally``: a failing run gives the lease back at once
    instead of blocking the task for the rest of the lease.
    """
    lock = LeaseLock(redis, name, lease_ms=lease_ms)
    if not lock.acquire():
        yield None
        return
    try:
        if renew:
            lock.start_renewing()
        yield lock
    finally:
        lock.release()
