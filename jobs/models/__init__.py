"""Durable state of background jobs, readable by any process and any page.

One module per concern.
"""

from jobs.models.schedule import ScheduledTaskAction, ScheduledTaskState
from jobs.models.status import JobStatus

__all__ = ["JobStatus", "ScheduledTaskAction", "ScheduledTaskState"]
