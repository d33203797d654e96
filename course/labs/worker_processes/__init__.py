"""Lab for "Worker Processes": how a pool's size and its supervisor shape the work.

Model part, the lesson's two measurements on a virtual clock:

1. ``pool`` — ``jobs`` equal I/O-bound jobs of ``job_ms`` each, pulled one at a time
   by 1, 2, 4 … workers (a free worker takes the next job). The duration is counted in
   slices of one job's length, rounded down as the lesson does, so the number does
   not depend on the machine: 12 jobs take 12, 6 and 3 slices.
2. ``supervision`` — the lesson's five jobs on two workers, the third of which kills
   the process running it. The supervisor replaces every dead worker and puts its job
   back until it has been tried ``MAX_ATTEMPTS`` times, then dead-letters it.

Live part, the same two questions asked of real rq workers:

- ``live_pool`` — 1, 2, 4 real worker processes (``labchild worker --simple``: jobs
  run inside the worker, as the lesson's workers run them, with no fork per job) on
  a private queue fed ``jobs`` jobs that sleep ``job_ms``. The duration runs from
  the first job's start to the last job's end, as the jobs themselves recorded it,
  so starting the processes is not counted (the lesson rounds that away).
- ``live_supervision`` — two forking rq workers (``rqworker``'s default: each job runs
  in a forked work-horse, and the worker process is its supervisor) get the five
  jobs; job 3 kills its work-horse with SIGKILL. rq sees the horse die, and with the
  job's retry policy (one retry, so two attempts) puts it back; the second death
  sends it to the failed-job registry, rq's dead letters. The four others complete,
  and the two worker processes outlive both deaths: what the lesson's pool does by
  spawning replacements, rq does by forking a fresh horse for the next job.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab, Param
from course.labs.worker_processes import live, model

__all__ = ["LAB"]


LAB = Lab(
    slug="worker-processes",
    title="Worker Processes",
    params=(
        Param(
            "jobs",
            "int",
            12,
            "equal jobs in the queue (0: an empty queue, no slices)",
            minimum=0,
            maximum=500,
            work="value",
        ),
        Param(
            "job_ms", "int", 100, "how long one job waits (ms)", minimum=1, maximum=5000
        ),
        Param(
            "workers",
            "int_list",
            [1, 2, 4],
            "pool sizes to compare, one row each (none: no pool rows)",
            minimum=1,
            maximum=16,
            min_items=0,
            max_items=6,
            work="count",
        ),
    ),
    model=model.model,
    live=live.live,
    charts=(
        Chart(
            table="pool",
            label="workers",
            values=("slices",),
            title="Duration of the same jobs by pool size",
            unit="slices",
        ),
        Chart(
            table="live_pool",
            label="workers",
            values=("slices",),
            title="Measured on real rq workers",
            unit="slices",
        ),
    ),
)
