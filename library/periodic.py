"""The library's periodic tasks, registered with the scheduler in LibraryConfig.ready().

A task's name is its identity in the database (ScheduledTaskState and
ScheduledTaskAction rows): renaming one starts a new schedule.
"""

from jobs.recurrence import Daily, Every
from jobs.scheduler import PeriodicTask

PERIODIC_TASKS: tuple[PeriodicTask, ...] = (
    PeriodicTask(
        name="overdue_notifications",
        func="library.services.notices.overdue_notifications_send",
        recurrence=Daily(hour=6),
        pass_slot=True,
    ),
    PeriodicTask(
        # A newer summary covers everything a missed one would have said.
        name="inventory_summary",
        func="library.services.inventory.inventory_summary_refresh",
        recurrence=Every.minutes(15),
    ),
)
