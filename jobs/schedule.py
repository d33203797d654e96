"""Periodic tasks enqueued by the scheduler process.

``due_tasks`` is a pure policy: given the last enqueue time of each task and "now" it
says which tasks are due, so it is tested without a clock or Redis.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PeriodicTask:
    name: str
    func: str  # dotted path of the rq job
    every: datetime.timedelta
    queue: str = "default"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    # Inline tasks run in the scheduler process itself: the messaging sweep must work
    # when Redis lost its queues, so it cannot wait in one.
    inline: bool = False


PERIODIC_TASKS: tuple[PeriodicTask, ...] = (
    PeriodicTask(
        name="messaging_sweep",
        func="messaging.tasks.sweep",
        every=datetime.timedelta(seconds=2),
        inline=True,
    ),
    PeriodicTask(
        name="messaging_trim",
        func="messaging.tasks.trim",
        every=datetime.timedelta(minutes=10),
        queue="messaging",
    ),
    PeriodicTask(
        name="jobstatus_prune",
        func="jobs.tasks.jobstatus_prune",
        every=datetime.timedelta(hours=1),
        kwargs={"older_than_days": 7},
    ),
)


def due_tasks(
    tasks: tuple[PeriodicTask, ...],
    last_enqueued: Mapping[str, datetime.datetime],
    now: datetime.datetime,
) -> list[PeriodicTask]:
    """Return the tasks whose interval has passed since they were last enqueued.

    A task never enqueued is due at once, so a fresh deployment runs each task early.
    """
    return [
        task
        for task in tasks
        if task.name not in last_enqueued
        or now - last_enqueued[task.name] >= task.every
    ]
