"""Lab for "Load Shedding": ten requests at once, with and without a queue bound.

Model part (the course's ``admission.mjs`` and its measuring script): ``requests``
arrive at the same instant at a server that runs ``max_concurrent`` jobs of
``job_ms`` at once. ``unbounded`` queues every other request; ``controlled``
queues at most ``max_queue`` and answers the rest ``503`` at once. A finished job
starts the next queued one. Latency is counted in hundred-millisecond slices
(``int(seconds * 10)``, as the script's awk does), and the rows are the lines of
``sort | uniq -c`` under ``LC_ALL=C``: status, then the space-padded slice.

Live part (``live_latency``): two real daphne processes of this project
(``config.asgi:application``) with the lab-only route ``/_lab/work`` mounted
(``LIBRARY_LAB_ROUTES=on``), each behind the real admission control
(``jobs.shedding``) set by environment: ``max_concurrent`` running, and a queue
of ``requests`` places (unbounded: never full) or of ``max_queue``. ``requests``
simultaneous GETs of ``/_lab/work?ms=job_ms`` go to each, one connection apiece;
their status and latency are measured in this process. On a loaded machine a
slice may shift up by one, as the course warns; the statuses and counts do not.

Model part with the randomness put back (``variability``): requests arrive evenly
(``fixed``, the course's setting) or at random (``poisson``) at ``utilisations``
percent of what ``max_concurrent`` places finish, each taking ``job_ms`` on average
with a spread of ``service_cv``. A seeded simulation of ``variability_jobs``
requests per load (course.labs.harness.queueing) gives the unbounded server's wait
for a place (ms), its average queue (L) beside arrival rate times mean wait (lambda W),
Kingman's approximation (with several places: the Erlang C wait scaled by the
same variability factor) and the M/M/c wait; then the same requests meet the
controlled server's ``max_queue`` places: the share it sheds and the p99 wait of
the rest. From 100 % on only the controlled server has a steady state.

The live part does not repeat it: at the lesson's 300 ms jobs on two places a few
hundred random requests take minutes per load, and shorter jobs would make the
HTTP round trip, not the queue, most of what is measured.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.harness.queueing import variability_problem
from course.labs.load_shedding import live, model
from course.labs.load_shedding.params import PARAMS, LoadSheddingParams

__all__ = ["LAB"]


LAB = Lab(
    slug="load-shedding",
    title="Load Shedding",
    params=PARAMS,
    params_type=LoadSheddingParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="latency",
            label="mode",
            values=("count",),
            title="Requests per status and latency slice",
            unit="requests",
        ),
        Chart(
            table="variability",
            label="utilisation_pct",
            values=("p50_wait_ms", "p99_wait_ms"),
            title="Wait for a place without a bound, random arrivals, by load (%)",
            unit="ms",
        ),
    ),
    combination_check=variability_problem,
    notes=(
        "The live part starts two real daphne behind the project's admission "
        "control and sends the requests at once to a lab-only endpoint. The "
        "variability table is model only: a random stream of 300 ms requests long "
        "enough for a p99 takes minutes per load."
    ),
)
