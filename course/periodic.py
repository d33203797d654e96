"""The course's periodic tasks, registered with the scheduler in CourseConfig.ready().

A task's name is its identity in the database (ScheduledTaskState rows).
"""

from jobs.recurrence import Every
from jobs.scheduler import PeriodicTask

PERIODIC_TASKS: tuple[PeriodicTask, ...] = (
    PeriodicTask(
        # A live run removes its own sandbox; this catches the runs that were killed.
        name="lab_sandbox_sweep",
        func="course.sandbox.sandbox_sweep",
        recurrence=Every.minutes(5),
    ),
)
