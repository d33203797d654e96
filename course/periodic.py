"""The course's periodic tasks, registered with the scheduler in CourseConfig.ready().

A task's name is its identity in the database (ScheduledTaskState rows).
"""

from jobs.recurrence import Daily, Every
from jobs.scheduler import PeriodicTask

PERIODIC_TASKS: tuple[PeriodicTask, ...] = (
    PeriodicTask(
        # A live run removes its own sandbox; this catches the runs that were killed.
        name="lab_sandbox_sweep",
        func="course.sandbox.sandbox_sweep",
        recurrence=Every.minutes(5),
    ),
    PeriodicTask(
        # Lab workers fail each other's dead runs from their heartbeats; this covers
        # the moment no lab worker is left alive to do it. Inline: it must not wait
        # in a queue behind the work it unblocks.
        name="lab_runs_expire",
        func="course.services.labwork.lab_runs_expire",
        recurrence=Every(seconds=10),
        inline=True,
    ),
    PeriodicTask(
        # A drill's supervisor closes its own drill when idle; this finishes the
        # drills whose supervisor was killed or hung (and sweeps what they left)
        # when nobody looks at the drill pages, which do the same.
        name="drills_expire",
        func="course.drills.services.drills_expire",
        recurrence=Every.minutes(1),
    ),
    PeriodicTask(
        # The explorable pages keep a file per parameter set tried: bounded here.
        name="model_cache_sweep",
        func="course.textbook.model_cache_sweep",
        recurrence=Every.minutes(30),
    ),
    PeriodicTask(
        # Every anonymous visitor who runs a lab or reads a lesson gets a session:
        # expired ones are deleted nightly (Django's clearsessions).
        name="sessions_clear_expired",
        func="course.services.learners.sessions_clear_expired",
        recurrence=Daily(hour=3),
    ),
)
