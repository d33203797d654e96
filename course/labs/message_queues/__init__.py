"""Lab for "Message Queues": acknowledgement, competing consumers and queue depth.

Model part, ported from the lesson's experiments on a queue with a virtual clock:

1. ``unacknowledged`` — three jobs; the first consumer acknowledges all but the second
   and stops. The clock moves on by ``visibility``; a second consumer then receives
   the abandoned job again.
2. ``competing`` — twelve jobs taken in turn by three consumers (fixed, as printed).
3. ``depth`` — per consumer count, queue depth at the end of each round when
   ``production`` jobs arrive per round and each consumer finishes
   ``consumption_rate``.

``unacknowledged`` has one row per delivery, in the order the course prints its
per-delivery lines: virtual time, which consumer, message id, how many times that
message has been handed out so far, and the consumer's verdict ("acknowledged" or
"left unacknowledged"). The course's depth/visible lines and its total
go to the extra tables ``queue_state`` and ``deliveries``.

4. ``variability`` — the depth run's lesson with the randomness put back: jobs arrive
   evenly (``fixed``, the course's setting) or at random (``poisson``) at
   ``utilisations`` percent of what ``variability_consumers`` consumers finish, and job
   lengths spread with ``service_cv``. A seeded first-come-first-served simulation of
   ``variability_jobs`` jobs per load (course.labs.harness.queueing) gives the wait
   before a consumer starts each job, in mean job lengths, the average depth (L) beside
   arrival rate times mean wait (lambda W), and the waits Kingman's approximation and
   Erlang C predict. A load of 100 % or more has no steady state: its row says so and
   leaves the waits empty.

The live part does not measure variability: its probes travel the outbox, relay and
claim of the real spine, whose polling delays would swamp the queueing wait in a run
short enough to wait for; the worker-processes lab measures it on real rq workers.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.harness.queueing import variability_problem
from course.labs.message_queues import live, model
from course.labs.message_queues.params import PARAMS, MessageQueuesParams

__all__ = ["LAB"]


LAB = Lab(
    slug="message-queues",
    title="Message Queues",
    params=PARAMS,
    params_type=MessageQueuesParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="depth",
            label="consumers",
            values=("depths",),
            title="Queue depth at the end of each round",
            unit="messages",
            split=True,
            category_prefix="round ",
        ),
        Chart(
            table="competing",
            label="consumer",
            values=("messages",),
            title="Messages handled per competing consumer",
            unit="messages",
        ),
        Chart(
            table="variability",
            label="utilisation_pct",
            values=("p50_wait", "p99_wait"),
            title="Wait before a consumer starts the job, by load (%)",
            unit="job lengths",
        ),
    ),
    combination_check=variability_problem,
    notes=(
        "The variability table is model only: the live part's probes cross the "
        "outbox relay and the claim loop, whose polling would hide the queueing "
        "wait in a run short enough to wait for. The worker-processes lab measures "
        "the same waits on real rq workers."
    ),
)
