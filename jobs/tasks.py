"""rq jobs of the jobs app. Jobs take plain values and call one service."""

from __future__ import annotations

import datetime

from jobs.scheduler import scheduled_run as run_slot
from jobs.scheduler_actions import scheduled_task_action_run as run_action
from jobs.services import jobstatus_prune as prune


def jobstatus_prune(*, older_than_days: int = 7) -> int:
    """Delete finished job statuses older than the given age; return how many."""
    return prune(older_than_days=older_than_days)


def scheduled_run(*, name: str, slot: str) -> str:
    """Run one slot (ISO 8601, UTC) of a periodic task under its lease lock."""
    return run_slot(name=name, slot=datetime.datetime.fromisoformat(slot))


def scheduled_run_now(*, action_id: int) -> str:
    """Run an operator's run-now (a ScheduledTaskAction id) under the task's lease."""
    return run_action(action_id=action_id)
