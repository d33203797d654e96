"""The jobs app's own periodic tasks, registered in JobsConfig.ready().

A task's name is its identity in the database (ScheduledTaskState and
ScheduledTaskAction rows): renaming one starts a new schedule.
"""

from jobs.recurrence import Every
from jobs.scheduler import PeriodicTask

PERIODIC_TASKS: tuple[PeriodicTask, ...] = (
    PeriodicTask(
        # Abandoned rq jobs retried or failed (jobs.supervision).
        name="rq_maintenance",
        func="jobs.supervision.rq_maintenance",
        recurrence=Every.minutes(1),
    ),
    PeriodicTask(
        name="jobstatus_prune",
        func="jobs.tasks.jobstatus_prune",
        recurrence=Every.minutes(60),
        kwargs={"older_than_days": 7},
    ),
    PeriodicTask(
        # The operations history's levels (jobs.series): inline, because a sample
        # queued behind the backlog it measures would arrive when it matters least;
        # the slot names the minute, so a late start still lands on its own.
        name="series_sample",
        func="jobs.series.series_sample",
        recurrence=Every.minutes(1),
        inline=True,
        pass_slot=True,
    ),
)
