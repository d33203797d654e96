"""Lab for "Backpressure": a producer faster than its consumer, four queue policies.

Model part (the course's ``simulation.mjs`` and ``stream.mjs``, ported literally):

1. ``policies`` — a virtual clock advances one millisecond at a time for
   ``window_ms``; integer accumulators rise by ``produce_per_s`` and
   ``consume_per_s`` every millisecond and release one job per thousand. The queue
   is unbounded, or bounded at ``capacity`` with tail drop, head drop or blocking
   (a blocked job is not produced; the producer waits a millisecond and the
   accumulator keeps rising). ``producer_wait_ms`` counts the blocked milliseconds.
2. ``producer_signal`` — node:stream's Writable with a 16 KiB high-water mark and
   sixty-four 1 KiB writes, each taking 5 ms: a producer that stops at ``write()``
   returning false and waits for ``drain`` keeps the buffer at the mark; one that
   ignores it buffers everything. ``writableLength`` counts the chunk being
   written, and ``drain`` fires once the buffer is empty. Course constants.

Live part (``live_policies``): the same four policies on a real bounded queue
(``jobs.backpressure.BoundedQueue``) in front of a private rq queue drained by two
real rq worker processes. The lab's process produces ``produce_per_s`` jobs per
second for ``window_ms``; each job sleeps ``2000 / consume_per_s`` ms, so two
workers would drain ``consume_per_s`` per second if forking a work-horse were free
(it is not: the measured drain is slower). Unbounded is the same bound with a
capacity no run reaches; tail drop is ``drop_newest``, head drop ``drop_oldest``,
block is ``block`` with the rest of the window as its timeout. At the end of the
window: delivered = jobs started, remaining = jobs still waiting, dropped = refused
plus displaced, peak and the longest enqueue → start wait from the bound's own
counters in Redis, with the mean wait (``average_wait_ms``); producer_wait_ms is the
time the producer was held.

Model part, with the randomness put back (``variability``): jobs arrive evenly
(``fixed``, the course's setting) or at random (``poisson``) at ``utilisations`` percent
of ``consume_per_s``, and job lengths spread with ``service_cv``. A seeded simulation of
``variability_jobs`` jobs per load (course.labs.harness.queueing) gives the unbounded
queue's wait before the consumer starts each job (ms), its average length (L) beside
arrival rate times mean wait (lambda W), Kingman's approximation and the M/M/1 wait;
then the same jobs meet a queue of ``capacity`` places with tail drop: the share it
refuses and the p99 wait of the rest. From 100 % on, the unbounded queue has no steady
state and its cells stay empty; the bounded one stays stable by refusing.

The live part does not repeat the variability run: its four ten-second windows
already take most of a minute, and a random stream long enough for a p99 would
double that.
"""

from __future__ import annotations

from course.labs.backpressure import live, model
from course.labs.backpressure.params import PARAMS, BackpressureParams
from course.labs.harness.base import Chart, Lab
from course.labs.harness.queueing import variability_problem

__all__ = ["LAB"]


LAB = Lab(
    slug="backpressure",
    title="Backpressure",
    params=PARAMS,
    params_type=BackpressureParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="policies",
            label="policy",
            values=("delivered", "dropped", "remaining"),
            title="Where the rate mismatch is written down",
            unit="jobs",
        ),
        Chart(
            table="policies",
            label="policy",
            values=("longest_wait_ms", "producer_wait_ms"),
            title="Longest job wait and producer wait",
            unit="ms",
        ),
        Chart(
            table="variability",
            label="utilisation_pct",
            values=("p50_wait_ms", "p99_wait_ms"),
            title="Wait in an unbounded queue, random arrivals, by load (%)",
            unit="ms",
        ),
    ),
    combination_check=variability_problem,
    notes=(
        "The live part produces into a real bounded queue (jobs.backpressure) in "
        "front of two real rq worker processes, one window per policy. The "
        "variability table is model only: a random stream long enough for a p99 "
        "would double a live run that already takes most of a minute."
    ),
)
