"""A lease lock in Redis: the right to run a scheduled task, drain a lane or fill a
cache key, for a bounded time.

``LeaseLock`` is redis-py's ``redis.lock.Lock``, the one lock class of the project:

- Acquisition is one ``SET key token NX PX lease``: the existence check and the write
  are a single command, so two processes asking at once cannot both get it.
- The token is unique per lock (host, pid, random), and ``release``, ``reacquire``
  (renewal to a full term) and ``extend`` are redis-py's Lua scripts, which compare
  it before touching the key: a holder whose lease ran out and was taken over gets
  ``LockNotOwnedError`` and cannot delete or extend the new holder's lease.
- The key expires by itself, so a holder that crashed blocks for at most one lease.
  A holder that runs long renews the lease from a background thread; if a renewal
  finds the lease gone, ``lost`` is set and the work should stop.
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
from typing import Literal, cast

from redis import Redis
from redis.commands.core import Script
from redis.exceptions import LockError, LockNotOwnedError
from redis.lock import Lock

log = logging.getLogger("jobs.locks")

KEY_PREFIX = "lease:"


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


class LeaseLock(Lock):
    """The lock ``<prefix><name>`` held for ``lease_ms``; acquire it, then release it.

    What this subclass adds to redis-py's ``Lock``, and why:

    - The lease is kept in milliseconds. ``Lock`` keeps ``timeout`` in seconds and
      truncates ``timeout * 1000`` to an int when it sets or resets the TTL, so a
      1001 ms lease would become 1000 ms: ``do_acquire`` and ``do_reacquire`` use
      ``lease_ms`` itself.
    - The token is chosen up front (``owner``, host:pid:random unless given) rather
      than at each acquisition: the admin shows who holds a lease, and the holder is
      named before it asks.
    - ``thread_local=False``: the renewal thread, and the thread a cache refresh
      hands its lock to, release or renew with the token the acquiring thread got.
    - Non-blocking by default: every caller either skips a held lease or polls for
      something else between attempts (single-flight reads the value).
    - ``start_renewing`` (a daemon thread calling ``reacquire``), ``lost`` (set when
      a renewal finds the lease gone) and ``release_if_owned``, the quiet release of
      a ``finally`` block.
    """

    def __init__(
        self,
        redis: Redis,
        name: str,
        *,
        lease_ms: int,
        owner: str | None = None,
        prefix: str = KEY_PREFIX,
        blocking: bool = False,
        blocking_timeout: float | None = None,
        sleep: float = 0.1,
    ) -> None:
        if lease_ms < 1:
            raise ValueError("a lease lasts at least 1 ms")
        super().__init__(
            redis,
            f"{prefix}{name}",
            timeout=lease_ms / 1000,  # what Lock checks for; the TTL is lease_ms
            sleep=sleep,
            blocking=blocking,
            blocking_timeout=blocking_timeout,
            thread_local=False,
        )
        self.lease_ms = lease_ms
        self.owner = owner or new_owner_token()
        self.lost = threading.Event()
        self._stop_renewing = threading.Event()
        self._renewer: threading.Thread | None = None

    def acquire(
        self,
        sleep: float | None = None,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
        token: str | None = None,
    ) -> bool:
        """Take the lease (``Lock.acquire``) under ``owner``; return whether it did.

        A ``token`` given here becomes the lock's ``owner``.
        """
        if token is not None:
            self.owner = token
        return bool(super().acquire(sleep, blocking, blocking_timeout, self.owner))

    def do_acquire(self, token: str) -> bool:
        return bool(self.redis.set(self.name, token, nx=True, px=self.lease_ms))

    def do_reacquire(self) -> Literal[True]:
        script = cast(Script, self.lua_reacquire)
        args = [self.local.token, self.lease_ms]
        if not script(keys=[self.name], args=args, client=self.redis):
            self.lost.set()
            raise LockNotOwnedError(
                "Cannot reacquire a lock that's no longer owned", lock_name=self.name
            )
        return True

    def release(self) -> None:
        """Stop renewing, then give the lease back (``Lock.release``).

        Raises ``LockNotOwnedError`` when the lease ran out (whoever holds the key
        now keeps it) and ``LockError`` when this lock does not hold it (never
        acquired, or released already).
        """
        self._stop_renewing.set()
        if (
            self._renewer is not None
            and self._renewer is not threading.current_thread()
        ):
            self._renewer.join()
        super().release()

    def release_if_owned(self) -> bool:
        """Release if this lock still holds the lease; return whether it did.

        For ``finally`` blocks: a lease that ran out or was given back already is
        not an error there. Redis errors propagate.
        """
        try:
            self.release()
        except LockError:
            return False
        return True

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
                self.reacquire()
            except LockNotOwnedError:
                log.warning("lease %s lost by %s", self.name, self.owner)
                return
            except Exception:  # Redis unreachable: the lease may run out
                log.exception("lease %s: renewal failed", self.name)


_BREAK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def lease_break(redis: Redis, name: str, *, owner: str) -> bool:
    """Delete the lease ``name`` if ``owner`` still holds it; return whether it did.

    For an operator whose check found the holder dead: a compare-and-delete in one
    script, so a lease taken over meanwhile by a new holder is left alone.
    """
    script = redis.register_script(_BREAK)
    return bool(script(keys=[lock_key(name)], args=[owner]))


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
        lock.release_if_owned()
