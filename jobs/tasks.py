"""rq jobs of the jobs app. Jobs take plain values and call one service."""

from __future__ import annotations

from jobs.services import jobstatus_prune as prune


def jobstatus_prune(*, older_than_days: int = 7) -> int:
    """Delete finished job statuses older than the given age; return how many."""
    return prune(older_than_days=older_than_days)
