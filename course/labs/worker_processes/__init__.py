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

3. ``variability`` (model) — the pool under a stream of jobs instead of a batch:
   jobs arrive evenly (``fixed``, the course's setting) or at random (``poisson``)
   at ``utilisations`` percent of what each pool of ``workers`` finishes, with job
   lengths of mean ``job_ms`` spread by ``service_cv``. A seeded FIFO simulation of
   ``variability_jobs`` jobs per pool and load (course.labs.harness.queueing) gives
   the wait before a worker starts each job (ms), the average number waiting (L)
   beside arrival rate times mean wait (lambda W), and Erlang C's M/M/c wait. A pool
   is sized below full load, so 100 % or more is refused.
- ``live_variability`` — two real rq workers (``--simple``) and a random stream. First
  ``CALIBRATION_JOBS`` back-to-back jobs time what one job of ``LIVE_MEAN_MS`` really
  holds a worker (``service_ms``: the sleep, rq's own work per job, the machine's
  delays); then, per load of ``LIVE_LOADS``, jobs arrive at Poisson moments at that
  share of what the two finish, sleeping exponential times of mean ``LIVE_MEAN_MS``.
  Each job's wait runs from just before its enqueue to its own recorded start; the
  queue's length, read every ``SAMPLE_S``, gives L beside lambda W; Kingman's and
  Erlang C's waits for the measured service time stand beside them. A couple of
  hundred jobs per load keep the whole live run under a minute, which is few for a
  p99 and, near 85 %, too few for the queue to reach its steady state from empty.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.harness.queueing import variability_problem
from course.labs.worker_processes import live, model
from course.labs.worker_processes.params import PARAMS, WorkerProcessesParams

__all__ = ["LAB"]


LAB = Lab(
    slug="worker-processes",
    title="Worker Processes",
    params=PARAMS,
    params_type=WorkerProcessesParams,
    model=model.model,
    live=live.LIVE,
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
        Chart(
            table="variability",
            label="load",
            values=("p50_wait_ms", "p99_wait_ms"),
            title="Wait before a worker starts the job, by pool and load",
            unit="ms",
        ),
        Chart(
            table="live_variability",
            label="utilisation_pct",
            values=("p50_wait_ms", "p99_wait_ms"),
            title="Measured on two real rq workers, random arrivals, by load (%)",
            unit="ms",
        ),
    ),
    combination_check=variability_problem,
    notes=(
        "The live part also feeds two real rq workers a random stream of jobs at "
        "three loads and measures each job's wait from enqueue to start."
    ),
)
