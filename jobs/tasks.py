"""rq jobs of the jobs app. Jobs take plain values and call one service."""

from __future__ import annotations

import datetime

from jobs.scheduling import scheduled_run as run_slot
from jobs.services import jobstatus_prune as prune


def jobstatus_prune(*, older_than_days: int = 7) -> int:
    """Delete finished job statuses older than the given age; return how many."""
    return prune(older_than_days=older_than_days)


def scheduled_run(*, name: str, slot: str) -> str:
    """Run one slot (ISO 8601, UTC) of a periodic task under its lease lock."""
    return run_slot(name=name, slot=datetime.datetime.fromisoformat(slot))
