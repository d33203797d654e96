"""The library's periodic tasks, registered with the scheduler in LibraryConfig.ready().

A task's name is its identity in the database (ScheduledTaskState and
ScheduledTaskAction rows): renaming one starts a new schedule.
"""

from jobs.recurrence import CatchUp, Daily, Every, MonthEnd, Monthly
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
    PeriodicTask(
        # Each month's report is its own output: make up the last three at most.
        name="monthly_loan_report",
        func="library.report.start.monthly_report_start_for_slot",
        recurrence=Monthly(day=1, hour=2, minute=0, month_end=MonthEnd.CLAMP),
        catch_up=CatchUp.CATCH_UP,
        catch_up_limit=3,
        pass_slot=True,
        lease_seconds=120,
        timeout_seconds=3600,
    ),
)
