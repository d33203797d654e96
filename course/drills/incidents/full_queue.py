"""Drill: a full bounded queue shedding its producer's work.

Seeding (in the sandbox): rq's workers are suspended (``rq suspend``, as before a
deploy, and never resumed after it). A producer then offers its requests through a
real bounded queue of ten places in front of ``default``
(``course.drills.workload``): the ten places fill within two seconds, and from then
on every new request is dropped at the door. The producer keeps what was dropped
and offers it again later, so nothing is lost yet; but nothing moves either, and the
admin's *Bounded queues* page shows the bound full, the drops climbing and the
workers suspended.

The levers (``jobs.admin_bounds``): resume the workers, and resize the bound. A
bigger bound alone only fills more slowly: without a consumer every place is taken
in the end.

The checker: the workers take jobs, the bound has room, the producer got every
request in (dropped ones included), and each request ran exactly once.
"""

from __future__ import annotations

import subprocess
import time
from typing import cast

import django_rq
from redis import Redis
from rq.suspension import is_suspended, suspend

from config.cpu_priority import child_group_options
from config.processes import ROOT, manage_command
from course.drills import workload
from course.drills.incidents.common import Findings, Verdict, settle
from jobs.bounds import bound_read


def _redis() -> Redis:
    connection: Redis = django_rq.get_connection(workload.QUEUE)
    return connection


def seed() -> dict[str, str]:
    suspend(_redis())
    # The producer runs for the drill's life, inside the sandbox (it inherits the
    # sandbox's environment and mark, so removal ends it with the rest).
    subprocess.Popen(
        manage_command("drill", "produce"),
        cwd=ROOT,
        **child_group_options(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _shedding_seen()
    return {
        "The producer": f"{workload.TOTAL} requests, {workload.RATE:g} a second, "
        f"through the bound “{workload.BOUND}” in front of the rq queue "
        f"“{workload.QUEUE}”"
    }


def _shedding_seen(deadline_s: float = 60.0) -> None:
    """Wait until the bound has dropped a request: the incident is under way."""
    end = time.monotonic() + deadline_s
    while int(_redis().get(workload.DROPS_KEY) or 0) == 0:
        if time.monotonic() > end:
            raise RuntimeError("the producer's bound never filled")
        time.sleep(0.1)


def _runs() -> dict[int, int]:
    raw = cast(dict[bytes, bytes], _redis().hgetall(workload.DONE_KEY))
    return {int(k): int(v) for k, v in raw.items()}


def _moving() -> bool:
    """Whether requests are still on their way to the workers (and workers take)."""
    connection = _redis()
    if is_suspended(connection):
        return False  # nothing moves: that is what is judged
    finished = connection.get(workload.FINISHED_KEY) is not None
    return not finished or len(_runs()) < workload.TOTAL


def check() -> Verdict:
    still = settle(_moving, deadline_s=45.0)
    connection = _redis()
    found = Findings()
    suspended = bool(is_suspended(connection))
    found.add(
        not suspended,
        "The workers take jobs: nobody holds them suspended.",
        "rq's workers are still suspended: alive, and taking no job.",
    )
    bound = bound_read(connection, workload.BOUND)
    found.add(
        not bound.full,
        f"The bound has room ({bound.stats['depth']} of {bound.capacity} places "
        "taken): new requests are admitted.",
        f"The bound is full ({bound.stats['depth']} of {bound.capacity}): every new "
        "request is dropped at the door.",
    )
    accepted = int(connection.scard(workload.ACCEPTED_KEY))
    drops = int(connection.get(workload.DROPS_KEY) or 0)
    found.add(
        accepted == workload.TOTAL,
        f"The producer got all {workload.TOTAL} requests in, the {drops} refusals "
        "included (it offered each dropped request again).",
        f"{workload.TOTAL - accepted} of the producer's {workload.TOTAL} requests "
        f"are not admitted yet ({drops} refusals so far).",
    )
    runs = _runs()
    twice = sorted(r for r, n in runs.items() if n > 1)
    found.add(
        len(runs) == workload.TOTAL and not twice,
        f"Each of the {workload.TOTAL} requests ran exactly once.",
        f"{workload.TOTAL - len(runs)} request(s) have not run"
        + (f", and {len(twice)} ran more than once" if twice else "")
        + ".",
    )
    return found.verdict(settling=still)
