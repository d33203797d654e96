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
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab, Param
from course.labs.load_shedding_lab import live, model

__all__ = ["LAB"]


LAB = Lab(
    slug="load-shedding",
    title="Load Shedding",
    params=(
        Param(
            "requests",
            "int",
            10,
            "requests sent at once (0: none, an empty table)",
            minimum=0,
            maximum=200,
            work="value",
        ),
        Param(
            "max_concurrent",
            "int",
            2,
            "jobs processed at once",
            minimum=1,
            maximum=100,
        ),
        Param(
            "max_queue",
            "int",
            2,
            "jobs that may wait (controlled)",
            minimum=0,
            maximum=1000,
        ),
        Param("job_ms", "int", 300, "duration of a job (ms)", minimum=1, maximum=5000),
    ),
    model=model.model,
    live=live.live,
    charts=(
        Chart(
            table="latency",
            label="mode",
            values=("count",),
            title="Requests per status and latency slice",
            unit="requests",
        ),
    ),
    notes=(
        "The live part starts two real daphne behind the project's admission "
        "control and sends the requests at once to a lab-only endpoint."
    ),
)
