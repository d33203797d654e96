"""What an operator sees of the bounded queues, and the two levers they have.

A bounded queue (``jobs.backpressure``) lives in Redis only: its waiting set and its
counters, under ``bp:<name>:…``. Its producers hold the capacity and the policy, so
a full bound that sheds work shows up nowhere else: not in rq's queue (which holds
only what was admitted) and not on the django-rq dashboard. ``bounds_read`` puts
each bound beside its rq queue and the workers that drain it:

- ``depth`` of ``capacity`` places taken, and the counters since it started
  (offered, accepted, dropped, delivered, the wait of the delivered);
- the rq queue's length and its workers, busy or idle;
- whether rq's workers are **suspended** (``rq suspend``, for a deploy or a
  maintenance): a suspended worker stays alive and takes no job, so its queues fill
  and every bound in front of them sheds.

The levers: ``bound_resize`` (``jobs.backpressure``) changes a bound's capacity for
every producer, and ``workers_resume`` lifts rq's suspension (``rq resume``). More
consumers are more worker processes: started outside the admin, by the process
manager.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

from redis import Redis
from rq import Queue, Worker
from rq.suspension import is_suspended, resume

from jobs.backpressure import BufferStats, buffer_stats, capacity_key

log = logging.getLogger("jobs.bounds")

_STATS_MATCH = "bp:*:stats"


@dataclass(frozen=True)
class BoundView:
    name: str
    queue: str
    capacity: int  # the capacity of the last admission (0: none recorded yet)
    resized: int | None  # the operator's capacity, when set
    stats: BufferStats
    queued: int  # jobs in the rq queue now
    workers: int
    busy: int

    @property
    def full(self) -> bool:
        return self.capacity > 0 and self.stats["depth"] >= self.capacity


@dataclass(frozen=True)
class BoundsReport:
    bounds: list[BoundView]
    suspended: bool


def _bound_names(redis: Redis) -> list[str]:
    names = set()
    for raw in redis.scan_iter(match=_STATS_MATCH, count=500):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        names.add(key.removeprefix("bp:").removesuffix(":stats"))
    return sorted(names)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def bound_read(redis: Redis, name: str) -> BoundView:
    """Return one bound beside its rq queue and the workers listening on it."""
    queue_name, capacity = cast(
        list[object], redis.hmget(f"bp:{name}:stats", ["queue", "capacity"])
    )
    resized = redis.get(capacity_key(name))
    queue = _text(queue_name)
    queued = workers = busy = 0
    if queue:
        rq_queue = Queue(queue, connection=redis)
        queued = rq_queue.count
        listening = Worker.all(queue=rq_queue)
        workers = len(listening)
        busy = sum(1 for worker in listening if worker.get_state() == "busy")
    return BoundView(
        name=name,
        queue=queue,
        capacity=int(_text(capacity) or 0),
        resized=int(_text(resized)) if resized is not None else None,
        stats=buffer_stats(redis, name),
        queued=queued,
        workers=workers,
        busy=busy,
    )


def bounds_read(redis: Redis) -> BoundsReport:
    """Return every bound that has counted an offer, and whether workers are held."""
    return BoundsReport(
        bounds=[bound_read(redis, name) for name in _bound_names(redis)],
        suspended=bool(is_suspended(redis)),
    )


def workers_resume(redis: Redis, *, who: str) -> bool:
    """Lift rq's suspension of every worker; return whether they were suspended."""
    if not is_suspended(redis):
        return False
    resume(redis)
    log.warning("rq workers resumed by %s", who)
    return True
