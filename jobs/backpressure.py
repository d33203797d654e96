"""Bounded enqueue in front of an rq queue: block, drop the newest, drop the oldest.

A producer faster than its workers grows the queue, and by L = λW the wait of every
job with it. ``BoundedQueue`` caps the number of jobs *waiting* (admitted, not yet
started) and applies one policy per producer when the cap is reached:

- ``block``: hold the producer, polling for room, up to ``block_timeout_s``; past
  it the new job is refused. Nothing queued is lost; the producer slows down.
- ``drop_newest`` (tail drop): refuse the new job at once.
- ``drop_oldest`` (head drop): admit the new job and cancel the oldest waiting one
  in rq, so the queue keeps younger jobs.

How capacity is counted (atomically, in Redis): a sorted set per bounded queue,
``bp:<queue>:waiting``, holds the ids of admitted jobs that have not started, scored
by their admission time (Redis ``TIME``, the same clock for every process). A Lua
script checks the set's size and admits (or evicts the oldest) in one step, so two
producers never both take the last place. The set, not rq's list, is the measure:
it is written before the rq push, so a job pushed an instant later is already
counted. The job runs through ``run_admitted``, which first removes its id from the
set (another script): that removal is the job's start and gives its wait
(enqueue → start). A job a worker has already popped from rq's list but not yet
started (its work-horse is forking) is not waiting any more: a full bound moves
such entries to ``bp:<queue>:starting`` (checked with ``LPOS``) before deciding, so
they neither hold a place nor become ``drop_oldest``'s victim. A job evicted by
``drop_oldest`` is cancelled in rq; if a worker took it a moment before the
cancel, ``run_admitted`` finds it in the ``bp:<queue>:displaced`` set and does not
run it, so a dropped job never runs.

An operator may resize a bound while it runs (``bound_resize``, the admin's
*Bounded queues* page): the capacity stored under ``bp:<queue>:capacity`` wins over
the producers' own from their next offer on. Each admission records the capacity
it applied and the rq queue in the stats hash, so the page can show both.

A place can leak only if a job is admitted and never pushed (the process died in
between) or its rq job is deleted by hand: when the set is full, entries older than
``STALE_AFTER_S`` whose rq job hash is gone are purged before refusing anyone.

The live ``backpressure`` lab drives all three policies with real rq workers. (The
course's lab runs are not rq jobs: their service refuses a run at the door when its
waiting places are taken, ``course.services.labqueue``.)
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict, cast

from redis import Redis
from rq import Queue
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job

Policy = Literal["block", "drop_newest", "drop_oldest"]
POLICIES: Final[tuple[Policy, ...]] = ("block", "drop_newest", "drop_oldest")
Outcome = Literal["accepted", "held", "displaced", "dropped"]

# How often a blocked producer asks again for room.
BLOCK_POLL_S: Final = 0.005
# An admitted entry this old whose rq job hash is gone is a leaked place.
STALE_AFTER_S: Final = 30
# Displaced ids are remembered this long (a worker racing the cancel sees them).
DISPLACED_TTL_S: Final = 3600
# How many of the oldest entries a full bound checks for jobs a worker has taken.
STARTING_SCAN: Final = 16

_ADMIT = """
local waiting, stats, displaced, starting = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, capacity, policy = ARGV[1], tonumber(ARGV[2]), ARGV[3]
-- An operator's resize (bound_resize) wins over the producers' own capacity.
local resized = redis.call('GET', KEYS[5])
if resized then capacity = tonumber(resized) end
redis.call('HSET', stats, 'capacity', capacity, 'queue', ARGV[10])
local stale_ms, job_prefix = tonumber(ARGV[4]), ARGV[5]
local count_attempt = ARGV[6] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if count_attempt then redis.call('HINCRBY', stats, 'produced', 1) end
local depth = redis.call('ZCARD', waiting)
if depth >= capacity then
  -- The oldest entries may already be in a worker's hands: pushed (their job
  -- hash exists) but no longer in rq's list. They are starting, not waiting:
  -- move them aside with their admission time, so run_admitted still measures
  -- their wait and drop_oldest never picks a job a work-horse is starting.
  local oldest = redis.call('ZRANGE', waiting, 0, ARGV[9] - 1, 'WITHSCORES')
  for i = 1, #oldest, 2 do
    local member, score = oldest[i], oldest[i + 1]
    if redis.call('EXISTS', job_prefix .. member) == 1 then
      if not redis.call('LPOS', ARGV[8], member) then
        redis.call('ZREM', waiting, member)
        redis.call('HSET', starting, member, score)
        depth = depth - 1
      end
    elseif tonumber(score) < now - stale_ms then
      redis.call('ZREM', waiting, member)  -- admitted, never pushed: a leak
      depth = depth - 1
    end
  end
end
local victim = ''
if depth >= capacity then
  if policy ~= 'drop_oldest' then return {0, '', depth} end
  victim = redis.call('ZPOPMIN', waiting)[1]
  -- Out of rq's list in the same step, so no worker can pop it before the cancel.
  redis.call('LREM', ARGV[8], 1, victim)
  redis.call('ZADD', displaced, now, victim)
  redis.call('ZREMRANGEBYSCORE', displaced, '-inf', now - ARGV[7] * 1000)
  redis.call('HINCRBY', stats, 'dropped', 1)
  depth = depth - 1
end
redis.call('ZADD', waiting, now, id)
depth = depth + 1
redis.call('HINCRBY', stats, 'accepted', 1)
if depth > tonumber(redis.call('HGET', stats, 'peak') or '0') then
  redis.call('HSET', stats, 'peak', depth)
end
return {1, victim, depth}
"""

_START = """
local waiting, stats, displaced, starting = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
local score = redis.call('ZSCORE', waiting, id)
if score then
  redis.call('ZREM', waiting, id)
else
  score = redis.call('HGET', starting, id)
  if score then
    redis.call('HDEL', starting, id)
  else
    if redis.call('ZREM', displaced, id) == 1 then
      redis.call('HINCRBY', stats, 'skipped', 1)
      return -1
    end
    return -2
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = now - tonumber(score)
if wait < 0 then wait = 0 end
redis.call('HINCRBY', stats, 'delivered', 1)
redis.call('HINCRBY', stats, 'wait_sum_ms', wait)
if wait > tonumber(redis.call('HGET', stats, 'wait_max_ms') or '0') then
  redis.call('HSET', stats, 'wait_max_ms', wait)
end
return wait
"""


@dataclass(frozen=True)
class Admission:
    """What a producer is told about one job it offered.

    ``outcome``: ``accepted`` at once, ``held`` (accepted after waiting
    ``held_ms``), ``displaced`` (accepted; ``dropped_job_id``, the oldest waiting
    job, was cancelled to make room) or ``dropped`` (refused: ``dropped_job_id`` is
    the offered job itself; with ``block`` the wait ran out after ``held_ms``).
    """

    outcome: Outcome
    job_id: str
    held_ms: float = 0.0
    dropped_job_id: str | None = None
    depth: int = 0

    @property
    def accepted(self) -> bool:
        return self.outcome != "dropped"


class BufferStats(TypedDict):
    depth: int
    peak: int
    produced: int
    accepted: int
    dropped: int
    held: int
    producer_wait_ms: int
    delivered: int
    skipped: int
    wait_max_ms: int
    wait_avg_ms: float


class BoundedQueue:
    """An rq queue with at most ``capacity`` waiting jobs and one full-queue policy.

    ``name`` names the bound (its Redis keys); several producers may share it, each
    with its own ``BoundedQueue`` and policy. ``clock`` and ``sleep`` time a blocked
    producer's wait (``block``); a test passes its own to step through it exactly.
    """

    def __init__(
        self,
        queue: Queue,
        *,
        capacity: int,
        policy: Policy,
        block_timeout_s: float = 1.0,
        name: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r} (one of {POLICIES})")
        self.queue = queue
        self.capacity = capacity
        self.policy: Policy = policy
        self.block_timeout_s = block_timeout_s
        self.name = name or queue.name
        self.clock = clock
        self.sleep = sleep
        self.redis: Redis = queue.connection
        self._keys = buffer_keys(self.name)
        self._admit = self.redis.register_script(_ADMIT)

    def enqueue(
        self,
        function: Callable[..., Any] | str,
        *args: Any,
        job_id: str,
        description: str | None = None,
        **options: Any,
    ) -> Admission:
        """Offer one job; return what became of it (never raises for a full queue).

        1. Ask the admit script for a place (the policy decides at a full queue).
        2. ``block``: while refused, sleep ``BLOCK_POLL_S`` and ask again until
           ``block_timeout_s`` has passed, then count the job as dropped.
        3. Push the job to rq (through ``run_admitted``); cancel the displaced one.
        """
        target = function if isinstance(function, str) else _dotted(function)
        started = self.clock()
        first = True
        waited = False
        while True:
            admitted, victim, depth = self._ask(job_id, count_attempt=first)
            first = False
            if admitted:
                break
            held = (self.clock() - started) * 1000
            if self.policy != "block" or held >= self.block_timeout_s * 1000:
                self.redis.hincrby(self._keys[1], "dropped", 1)
                if self.policy == "block":
                    self.redis.hincrby(self._keys[1], "producer_wait_ms", round(held))
                if self.policy != "block":
                    held = 0.0
                return Admission("dropped", job_id, held, job_id, depth)
            self.sleep(BLOCK_POLL_S)
            waited = True
        # Held is the wait for a place, up to admission: the push to rq below is not
        # part of it (a slow push must not make an admission at once look held).
        held = (self.clock() - started) * 1000 if waited else 0.0
        try:
            self.queue.enqueue(
                run_admitted,
                self.name,
                target,
                list(args),
                job_id=job_id,
                description=description or f"{target}{tuple(args)!r}",
                **options,
            )
        except Exception:
            self.redis.zrem(self._keys[0], job_id)  # give the place back
            raise
        if victim:
            _cancel(victim, self.redis)
            return Admission("displaced", job_id, 0.0, victim, depth)
        if waited:
            pipe = self.redis.pipeline()
            pipe.hincrby(self._keys[1], "held", 1)
            pipe.hincrby(self._keys[1], "producer_wait_ms", round(held))
            pipe.execute()
            return Admission("held", job_id, held, None, depth)
        return Admission("accepted", job_id, 0.0, None, depth)

    def _ask(self, job_id: str, *, count_attempt: bool) -> tuple[bool, str, int]:
        reply = self._admit(
            keys=[*self._keys, capacity_key(self.name)],
            args=[
                job_id,
                self.capacity,
                self.policy,
                STALE_AFTER_S * 1000,
                Job.redis_job_namespace_prefix,
                "1" if count_attempt else "0",
                DISPLACED_TTL_S,
                self.queue.key,
                STARTING_SCAN,
                self.queue.name,
            ],
        )
        admitted, victim, depth = cast(list[Any], reply)
        victim_text = victim.decode() if isinstance(victim, bytes) else str(victim)
        return bool(admitted), victim_text, int(depth)

    def stats(self) -> BufferStats:
        return buffer_stats(self.redis, self.name)

    def reset(self) -> None:
        """Forget the bound's waiting set and counters (not the rq jobs)."""
        self.redis.delete(*self._keys)


def buffer_keys(name: str) -> tuple[str, str, str, str]:
    """Return the waiting set, stats hash, displaced set and starting hash keys."""
    return (
        f"bp:{name}:waiting",
        f"bp:{name}:stats",
        f"bp:{name}:displaced",
        f"bp:{name}:starting",
    )


def capacity_key(name: str) -> str:
    """Return the key of an operator's capacity for the bound ``name`` (if resized)."""
    return f"bp:{name}:capacity"


def bound_resize(redis: Redis, name: str, capacity: int | None) -> None:
    """Set the capacity every producer of the bound ``name`` admits up to.

    It wins over the capacity the producers were built with, from their next offer
    on; ``None`` gives them theirs back. Jobs already waiting stay: a bound made
    smaller than its depth admits nothing until its workers bring it under.
    """
    if capacity is None:
        redis.delete(capacity_key(name))
        return
    if capacity < 1:
        raise ValueError("capacity must be at least 1")
    redis.set(capacity_key(name), capacity)


def buffer_stats(redis: Redis, name: str) -> BufferStats:
    """Return depth (waiting now), peak, counters and the wait of delivered jobs."""
    waiting, stats_key, _, _ = buffer_keys(name)
    pipe = redis.pipeline()
    pipe.zcard(waiting)
    pipe.hgetall(stats_key)
    depth, raw = pipe.execute()
    fields = {
        k.decode(): int(v)
        for k, v in cast(dict[bytes, bytes], raw).items()
        if k != b"queue"  # the rq queue's name, the one field that is no count
    }
    delivered = fields.get("delivered", 0)
    return {
        "depth": int(depth),
        "peak": fields.get("peak", 0),
        "produced": fields.get("produced", 0),
        "accepted": fields.get("accepted", 0),
        "dropped": fields.get("dropped", 0),
        "held": fields.get("held", 0),
        "producer_wait_ms": fields.get("producer_wait_ms", 0),
        "delivered": delivered,
        "skipped": fields.get("skipped", 0),
        "wait_max_ms": fields.get("wait_max_ms", 0),
        "wait_avg_ms": (
            round(fields.get("wait_sum_ms", 0) / delivered, 1) if delivered else 0.0
        ),
    }


def run_admitted(bound: str, target: str, args: list[Any]) -> Any:
    """Run a bounded job in a worker: leave the waiting set, then call ``target``.

    A job displaced by ``drop_oldest`` that a worker took before its cancel landed
    is not run. A job the bound never admitted (enqueued by hand) runs normally.
    """
    from django_rq import get_connection  # a worker has Django set up

    redis: Redis = _current_connection() or get_connection()
    job_id = _current_job_id()
    if job_id is not None:
        started = redis.register_script(_START)
        if int(cast(int, started(keys=list(buffer_keys(bound)), args=[job_id]))) == -1:
            return None
    return _resolve(target)(*args)


def _current_job_id() -> str | None:
    from rq import get_current_job

    job = get_current_job()
    return job.id if job is not None else None


def _current_connection() -> Redis | None:
    from rq import get_current_job

    job = get_current_job()
    return job.connection if job is not None else None


def _cancel(job_id: str, redis: Redis) -> None:
    # Already gone, or already taken by a worker: run_admitted skips it.
    with contextlib.suppress(NoSuchJobError, InvalidJobOperation):
        Job.fetch(job_id, connection=redis).cancel()


def _dotted(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def _resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.rpartition(".")
    return cast(Callable[..., Any], getattr(importlib.import_module(module), name))
