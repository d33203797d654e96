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

from course.labs.harness.base import Chart, Lab, Param
from course.labs.harness.queueing import variability_params, variability_problem
from course.labs.message_queues import live, model

__all__ = ["LAB"]


LAB = Lab(
    slug="message-queues",
    title="Message Queues",
    params=(
        Param(
            "visibility",
            "float",
            30.0,
            "visibility timeout, and how far the clock moves before consumer-2",
            minimum=0,
            exclusive_minimum=True,
            maximum=1e6,
        ),
        Param(
            "consumers",
            "int_list",
            [1, 2, 3],
            "consumer counts for the depth run, one row each "
            "(0: nobody consumes; none: no rows)",
            minimum=0,
            maximum=100,
            min_items=0,
            max_items=10,
            work="count",
        ),
        Param(
            "rounds",
            "int",
            6,
            "rounds in the depth run",
            minimum=1,
            maximum=500,
            work="value",
        ),
        Param("production", "int", 5, "jobs written per round", minimum=0, maximum=500),
        Param(
            "consumption_rate",
            "int",
            3,
            "jobs each consumer finishes per round",
            minimum=0,
            maximum=500,
        ),
        *variability_params(max_utilisation=150),
        Param(
            "variability_consumers",
            "int",
            1,
            "consumers sharing the queue in the variability run",
            minimum=1,
            maximum=16,
        ),
    ),
    model=model.model,
    live=live.live,
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
