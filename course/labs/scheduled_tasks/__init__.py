"""Lab for "Scheduled Tasks": where recurring runs land, and what a lease lock prevents.

Model part:

1. ``next_runs`` — the first ``runs`` run instants after ``start`` of six recurrence
   definitions, each computed from the one before, by the application's own
   ``jobs.recurrence.next_run`` (the same function the scheduler process uses). The
   lesson's four definitions, plus the 31st under the two other month-end policies.
2. ``overlap`` — the lesson's experiment on two real processes: each starts the same
   300 ms "report" at the same moment (a start barrier in a throwaway directory),
   unlocked or behind a lease lock held in a SQLite row, and the peak number of
   reports running at once is read from their shared trace file.

Live part: ``live_overlap`` — the same question asked of the application: two real
``manage.py scheduledrun probe`` processes, released together by a Redis signal,
each run the report without a lock or under the application's Redis lease lock
(``jobs.locks``); the trace is a Redis list both append to.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.scheduled_tasks import live, model
from course.labs.scheduled_tasks.model import check
from course.labs.scheduled_tasks.params import PARAMS, ScheduledTasksParams

__all__ = ["LAB"]


LAB = Lab(
    slug="scheduled-tasks",
    title="Scheduled Tasks",
    params=PARAMS,
    params_type=ScheduledTasksParams,
    model=model.model,
    live=live.LIVE,
    combination_check=check,
    charts=(
        Chart(
            table="overlap",
            label="mode",
            values=("runs", "skipped", "concurrent_peak"),
            title="Two processes start the same report at once",
            unit="runs",
        ),
    ),
)
