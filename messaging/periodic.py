"""Messaging's periodic tasks, registered with the scheduler in MessagingConfig.ready().

A task's name is its identity in the database (ScheduledTaskState and
ScheduledTaskAction rows): renaming one starts a new schedule.
"""

from jobs.recurrence import Every
from jobs.scheduler import PeriodicTask

PERIODIC_TASKS: tuple[PeriodicTask, ...] = (
    PeriodicTask(
        name="messaging_sweep",
        func="messaging.tasks.sweep",
        recurrence=Every(seconds=2),
        inline=True,
    ),
    PeriodicTask(
        name="messaging_trim",
        func="messaging.tasks.trim",
        recurrence=Every.minutes(10),
        queue="messaging",
    ),
)
