"""The producer of the full-queue drill, and the job its requests become.

A steady producer (``manage.py drill produce``, started inside the drill's sandbox)
offers ``TOTAL`` requests, ``RATE`` a second, through a real bounded queue
(``jobs.backpressure.BoundedQueue``, policy ``drop_newest``) in front of the rq
queue ``default``. A request the bound drops is not lost: the producer keeps it and
offers it again later, with a growing pause, as a well-behaved client does. Each
accepted request runs ``intake_apply`` on a worker, which counts its run per request
in Redis, so the checker can tell a request that never ran from one that ran twice.

Everything is kept under ``drill:intake:`` in the sandbox's Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import django_rq
from redis import Redis

from jobs.backpressure import BoundedQueue

BOUND: Final = "intake"
QUEUE: Final = "default"
CAPACITY: Final = 10
TOTAL: Final = 120
RATE: Final = 5.0  # new requests a second
RETRY_FIRST_S: Final = 0.5
RETRY_MAX_S: Final = 4.0

DONE_KEY: Final = "drill:intake:done"  # hash: request -> runs
ACCEPTED_KEY: Final = "drill:intake:accepted"  # set of requests admitted
DROPS_KEY: Final = "drill:intake:drops"  # counter of refusals met (retried)
FINISHED_KEY: Final = "drill:intake:finished"  # set once all were accepted


def intake_apply(request: int) -> None:
    """The work of one request: counted, so a repeat would show."""
    connection: Redis = django_rq.get_connection(QUEUE)
    connection.hincrby(DONE_KEY, str(request), 1)


@dataclass
class _Waiting:
    request: int
    due: float
    pause: float


def producer_run(
    *,
    total: int = TOTAL,
    rate: float = RATE,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Offer ``total`` requests at ``rate`` a second; offer dropped ones again."""
    connection: Redis = django_rq.get_connection(QUEUE)
    bound = BoundedQueue(
        django_rq.get_queue(QUEUE),
        capacity=CAPACITY,
        policy="drop_newest",
        name=BOUND,
    )
    start = clock()
    retries: list[_Waiting] = []
    offered = 0
    while offered < total or retries:
        now = clock()
        if offered < total and now >= start + offered / rate:
            retries.append(_Waiting(offered, now, RETRY_FIRST_S))
            offered += 1
        for waiting in [w for w in retries if w.due <= now]:
            admission = bound.enqueue(
                "course.drills.workload.intake_apply",
                waiting.request,
                job_id=f"intake-{waiting.request}",
            )
            if admission.accepted:
                connection.sadd(ACCEPTED_KEY, waiting.request)
                retries.remove(waiting)
            else:
                connection.incr(DROPS_KEY)
                waiting.due = now + waiting.pause
                waiting.pause = min(waiting.pause * 2, RETRY_MAX_S)
        sleep(0.02)
    connection.set(FINISHED_KEY, 1)
