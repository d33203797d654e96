"""Presence: how many people are watching a branch's live shelf now, on every instance.

Who is counted: a session. The live page gives an anonymous visitor a session too,
so each browser is one viewer however many tabs and reconnects it has, and two
visitors behind one address count apart. A socket without a session (a script, a
lab, a benchmark) is counted by its client address: a thousand sockets from one
client are one viewer. Only WebSocket viewers are counted; the SSE and polling
endpoints serve no live shelf.

Where it is kept: two Redis keys per branch. A sorted set holds one entry per open
socket, ``<viewer>|<socket>``, scored with the Redis server's clock (milliseconds)
at its last heartbeat; a hash counts each viewer's open sockets, and the number of
viewers is its length. A socket's entry is added once (a beat only moves its score)
and removed once, so the counts stay exact through repeated joins, and a viewer
leaves the hash when its last socket goes. An entry older than the TTL
(``REALTIME_PRESENCE_TTL_S``) is stale: its daphne went away without running
``disconnect`` (SIGKILL, a lost host). Every script below drops stale entries, and
their sockets from the counts, before it counts, so the count never includes them.
A consumer beats at a random 0.8-1.0 x TTL/3, so a living entry survives two lost
beats, and removes itself when its socket closes. The server's clock scores every
entry, so instances whose clocks disagree still agree on what is stale.

The page names its tab (``?tab=``) to be told the count as it changes; the tab does
not decide who is counted.

Telling the others: a consumer that sees the count change (its join, its leave, a
beat that finds another number because stale members expired) calls
``presence_announce``. Broadcasts to the branch's group are throttled to one per
``BROADCAST_INTERVAL_MS`` per branch across all instances; a thousand joins cost a
thousand writes and about one broadcast a second. A change at server time ``c`` is
covered by a broadcast claimed at ``s > c``, because the claim reads the count in
the same script, after the change. One task per branch per process does this:

1. ``broadcast_delay_ms`` (pure) compares the change's server time with the last
   claim's time, both returned by the change's own script;
2. if a wait is due, sleep it and read again; a claim made meanwhile after the
   newest change this process knows of covers them all, and the task ends;
3. otherwise claim with compare-and-set on the last-claim key; the winner reads
   the count in the same script and sends it. A lost claim returns the winner's
   time, and step 2's test decides whether it covered the change;
4. changes made while the task runs only raise its "newest change"; after sending,
   the task goes round again if one of them may postdate its claim.

A broadcast carries its claim time; a consumer ignores one older than what it last
told its socket, since messages from two instances may cross on the way.

When Redis fails: every call has a one-second timeout and no retry, the outage is
logged once per process, and the count is unknown (None) until a beat succeeds. The
socket stays open: presence is a courtesy, the shelf counts are the service.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from config.redis_async import async_redis

log = logging.getLogger("realtime")

BROADCAST_INTERVAL_MS: Final = 1000
# The last-claim key outlives the interval by far, so an expired key (read as "never
# broadcast") only ever means the last broadcast is long past.
_CLAIM_KEEP_MS: Final = 60_000
DEFAULT_TTL_S: Final = 30
_TAB = re.compile(r"[A-Za-z0-9_-]{8,64}")
TAB_RULE: Final = "tab must be 8 to 64 letters, digits, '-' or '_'"

Operation = Literal["join", "leave", "read", "claim"]

# One script for every operation, so a change, the prune and the count happen in one
# atomic step on the server's clock. KEYS (sharing a hash tag, so they live in one
# cluster slot): the sockets' sorted set, the last-claim key, the broadcast counter,
# the viewers' hash. ARGV: operation, TTL in ms, the socket's entry (join/leave) or
# the last claim the caller saw (claim), how long the claim key lives. An entry is
# ``<viewer>|<socket>``; its viewer is everything before the last '|'. Returns
# {viewers, server time in ms, last claim ('' if none), 1 if this call claimed}.
_SCRIPT: Final = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[2])
local claimed = 0
local function viewer_of(entry)
  return string.match(entry, '^(.*)|[^|]*$') or entry
end
local function drop(entry)
  if redis.call('ZREM', KEYS[1], entry) == 1 then
    local viewer = viewer_of(entry)
    if redis.call('HINCRBY', KEYS[4], viewer, -1) <= 0 then
      redis.call('HDEL', KEYS[4], viewer)
    end
  end
end
if ARGV[1] == 'join' then
  if redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[3]) == 1 then
    redis.call('HINCRBY', KEYS[4], viewer_of(ARGV[3]), 1)
  end
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
  redis.call('PEXPIRE', KEYS[4], 2 * ttl)
elseif ARGV[1] == 'leave' then
  drop(ARGV[3])
elseif ARGV[1] == 'claim' then
  if (redis.call('GET', KEYS[2]) or '') == ARGV[3] then
    redis.call('SET', KEYS[2], string.format('%d', now), 'PX', ARGV[4])
    redis.call('INCR', KEYS[3])
    claimed = 1
  end
end
local stale = redis.call(
  'ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - ttl))
for _, entry in ipairs(stale) do
  drop(entry)
end
return {redis.call('HLEN', KEYS[4]), now, redis.call('GET', KEYS[2]) or '', claimed}
"""


class PresenceEvent(TypedDict):
    """Group message ``presence.update`` sent to ``branch-<id>``."""

    type: Literal["presence.update"]
    branch: int
    watching: int
    at: int  # server time of the claim, ms


class PresenceFrame(TypedDict):
    """What a socket that named its tab is sent when the count it knows changes."""

    type: Literal["presence"]
    watching: int | None


@dataclass(frozen=True)
class Observation:
    """The branch's presence as one script saw it."""

    watching: int
    now_ms: int  # the Redis server's clock
    last_claim: str  # raw value of the last-claim key, "" when there is none
    claimed: bool = False

    @property
    def last_claim_ms(self) -> int | None:
        return int(self.last_claim) if self.last_claim else None


# --- pure policies ---------------------------------------------------------------


def broadcast_delay_ms(
    *, now_ms: int, last_sent_ms: int | None, interval_ms: int
) -> int:
    """Return how long to wait before broadcasting a branch's count; 0 means now.

    ``last_sent_ms`` is when the last broadcast was claimed (None: never, or so long
    ago its key expired). A clock that went back (a Redis failover to a host whose
    clock is behind) never makes the wait longer than one interval.
    """
    if last_sent_ms is None:
        return 0
    return max(0, min(interval_ms, last_sent_ms + interval_ms - now_ms))


def heartbeat_interval_s(ttl_s: float, rng: random.Random | None = None) -> float:
    """Return the wait before a socket's next beat: a random 0.8-1.0 x ``ttl_s``/3.

    Three beats fit in one TTL, so two may be lost before a living member expires;
    the spread keeps sockets opened together (a reconnect storm) from beating
    together.
    """
    draw = (rng or random).uniform(0.8, 1.0)
    return ttl_s / 3 * draw


def presence_viewer(session: str | None, address: str) -> str:
    """Return who a socket counts as: its session, or without one its address."""
    return f"session:{session}" if session is not None else f"addr:{address}"


def presence_member(viewer: str, socket: str) -> str:
    """Return a socket's entry among the branch's sockets: its viewer, then itself."""
    return f"{viewer}|{socket.replace('|', '_')}"


def tab_valid(tab: str) -> bool:
    """Return whether ``tab`` is an acceptable tab id (random, URL-safe, bounded)."""
    return _TAB.fullmatch(tab) is not None


def ttl_s() -> int:
    return int(getattr(settings, "REALTIME_PRESENCE_TTL_S", DEFAULT_TTL_S))


# --- Redis -------------------------------------------------------------------------


def sockets_key(branch_id: int) -> str:
    """Return the sorted set of the branch's open sockets, scored by last beat."""
    return f"realtime:presence:{{branch-{branch_id}}}:sockets"


def viewers_key(branch_id: int) -> str:
    """Return the hash of the branch's viewers and how many sockets each has open."""
    return f"realtime:presence:{{branch-{branch_id}}}:viewers"


def claim_key(branch_id: int) -> str:
    return f"realtime:presence:{{branch-{branch_id}}}:claimed"


def broadcasts_key(branch_id: int) -> str:
    """Return the key counting presence broadcasts of a branch (for labs and tests)."""
    return f"realtime:presence:{{branch-{branch_id}}}:broadcasts"


@dataclass
class _Connection:
    client: aioredis.Redis
    script: Any  # redis.commands.core.AsyncScript; its stubs are incomplete


# One client per event loop: a pooled connection belongs to the loop that made it.
# Keyed by URL too, so a test (or a reconfigured process) reaches the new Redis.
_connections: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, _Connection]
] = weakref.WeakKeyDictionary()


def _connection() -> _Connection:
    per_loop = _connections.setdefault(asyncio.get_running_loop(), {})
    url = settings.REDIS_URL
    found = per_loop.get(url)
    if found is None:
        # No retries: the default (three, with backoff) would hold a consumer's
        # connect for seconds while Redis is down; the next beat is the retry.
        client = async_redis(
            url,
            socket_timeout=1.0,
            socket_connect_timeout=1.0,
            retry=Retry(NoBackoff(), 0),
        )
        found = per_loop[url] = _Connection(client, client.register_script(_SCRIPT))
    return found


class _Outage:
    """Log a Redis outage once per process, not once per socket and beat."""

    down = False

    @classmethod
    def failed(cls, error: BaseException) -> None:
        if not cls.down:
            cls.down = True
            log.warning("presence unavailable (Redis): %s", error)

    @classmethod
    def answered(cls) -> None:
        if cls.down:
            cls.down = False
            log.info("presence available again")


async def _run(
    operation: Operation, branch_id: int, argument: str = ""
) -> Observation | None:
    """Run the script; return what it saw, or None if Redis did not answer."""
    try:
        connection = _connection()
        reply = await connection.script(
            keys=[
                sockets_key(branch_id),
                claim_key(branch_id),
                broadcasts_key(branch_id),
                viewers_key(branch_id),
            ],
            args=[operation, ttl_s() * 1000, argument, _CLAIM_KEEP_MS],
        )
    except (redis.RedisError, OSError) as error:
        _Outage.failed(error)
        return None
    _Outage.answered()
    count, now, last, claimed = reply
    last_text = last.decode() if isinstance(last, bytes) else str(last)
    return Observation(int(count), int(now), last_text, bool(claimed))


async def presence_join(branch_id: int, member: str) -> Observation | None:
    """Add or refresh a socket's entry (``presence_member``); None if Redis is down."""
    return await _run("join", branch_id, member)


async def presence_leave(branch_id: int, member: str) -> Observation | None:
    """Remove a socket's entry, and its viewer with its last; None if Redis is down."""
    return await _run("leave", branch_id, member)


async def presence_count(branch_id: int) -> int | None:
    """Return how many are watching the branch now, or None when unknown."""
    seen = await _run("read", branch_id)
    return None if seen is None else seen.watching


# --- throttled broadcast -----------------------------------------------------------


@dataclass
class _Due:
    """A branch's broadcast task in this process and the newest change it covers."""

    newest_change_ms: int
    task: asyncio.Task[None] | None = None


_due: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, _Due]] = (
    weakref.WeakKeyDictionary()
)


def presence_announce(layer: Any, branch_id: int, change: Observation) -> None:
    """Make sure a broadcast that includes ``change`` reaches the branch's group.

    Returns at once: the broadcast runs in a task of this event loop, shared by every
    change of the branch made in this process meanwhile.
    """
    due = _due.setdefault(asyncio.get_running_loop(), {})
    running = due.get(branch_id)
    if running is not None:
        running.newest_change_ms = max(running.newest_change_ms, change.now_ms)
        return
    entry = due[branch_id] = _Due(change.now_ms)
    entry.task = asyncio.create_task(
        _broadcast_when_due(layer, branch_id, change, entry, due),
        name=f"presence-branch-{branch_id}",
    )


async def _broadcast_when_due(
    layer: Any,
    branch_id: int,
    seen: Observation,
    entry: _Due,
    due: dict[int, _Due],
) -> None:
    try:
        while True:
            last = seen.last_claim_ms
            if last is not None and last > entry.newest_change_ms:
                return  # claimed after every change known here: it carries them
            wait = broadcast_delay_ms(
                now_ms=seen.now_ms,
                last_sent_ms=last,
                interval_ms=BROADCAST_INTERVAL_MS,
            )
            if wait > 0:
                await asyncio.sleep(wait / 1000)
                fresh = await _run("read", branch_id)
            else:
                fresh = await _run("claim", branch_id, seen.last_claim)
                if fresh is not None and fresh.claimed:
                    await _send(layer, branch_id, fresh)
                    if entry.newest_change_ms < fresh.now_ms:
                        return
                    # A change that landed in the same millisecond as the claim, or
                    # after it, may be missing from the count just sent.
            if fresh is None:
                return  # Redis is down; the sockets' next beats start again
            seen = fresh
    finally:
        # No await between the last test and this: a change arriving later finds no
        # task and starts its own.
        if due.get(branch_id) is entry:
            del due[branch_id]


async def _send(layer: Any, branch_id: int, seen: Observation) -> None:
    event: PresenceEvent = {
        "type": "presence.update",
        "branch": branch_id,
        "watching": seen.watching,
        "at": seen.now_ms,
    }
    try:
        await layer.group_send(f"branch-{branch_id}", event)
    except (redis.RedisError, OSError) as error:
        # Lost: a socket whose count differs finds out at its next beat and asks again.
        log.warning("presence broadcast to branch %s not sent: %s", branch_id, error)


# --- one socket's presence ---------------------------------------------------------


class Viewer:
    """One socket among a branch's viewers: join, beat, leave; what it was told.

    ``tell`` sends the socket a new count (None: unknown). It is called when a beat
    fails and by ``apply`` callers; broadcasts reach the socket through its group.
    """

    def __init__(
        self,
        *,
        branch_id: int,
        member: str,
        layer: Any,
        tell: Callable[[int | None], Awaitable[None]],
    ) -> None:
        self.branch_id = branch_id
        self.member = member
        self.layer = layer
        self.tell = tell
        self.watching: int | None = None
        self.as_of_ms = 0  # server time of what ``watching`` reflects
        self._beats: asyncio.Task[None] | None = None
        # Held around every beat and the leave: a beat's join already on its way to
        # Redis (another pooled connection) could otherwise land after the leave and
        # leave a ghost member until its TTL.
        self._lock = asyncio.Lock()
        self._gone = False

    async def join(self) -> int | None:
        """Count this socket in; return the branch's count including it."""
        seen = await presence_join(self.branch_id, self.member)
        if seen is not None:
            self.watching, self.as_of_ms = seen.watching, seen.now_ms
            presence_announce(self.layer, self.branch_id, seen)
        return self.watching

    def start_beating(self) -> None:
        self._beats = asyncio.create_task(
            self._beat_forever(), name=f"presence-beat-{self.member}"
        )

    async def leave(self) -> None:
        """Stop beating and count this socket out; tell the rest of the branch."""
        async with self._lock:
            self._gone = True
            if self._beats is not None:
                # Sleeping or waiting for the lock, never inside a beat.
                self._beats.cancel()
                self._beats = None
            seen = await presence_leave(self.branch_id, self.member)
        if seen is not None:
            presence_announce(self.layer, self.branch_id, seen)

    def apply(self, event: PresenceEvent) -> bool:
        """Take a broadcast count unless an older one; return whether it changed."""
        if event["at"] <= self.as_of_ms:
            return False  # crossed a newer count on the way
        changed = event["watching"] != self.watching
        self.watching, self.as_of_ms = event["watching"], event["at"]
        return changed

    async def beat(self) -> None:
        """Refresh this member once; ask for a broadcast if the count moved."""
        seen = await presence_join(self.branch_id, self.member)
        if seen is None:
            if self.watching is not None:
                self.watching = None
                await self.tell(None)
        elif seen.watching != self.watching:
            # Stale members expired, a broadcast was lost, or Redis is back: the
            # broadcast brings this socket (and the others) the number.
            presence_announce(self.layer, self.branch_id, seen)

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(heartbeat_interval_s(ttl_s()))
            async with self._lock:
                if self._gone:
                    return
                await self.beat()
