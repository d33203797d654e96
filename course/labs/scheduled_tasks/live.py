"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from redis import Redis

from config.processes import running, start_manage
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step, new_run_id
from course.labs.scheduled_tasks.model import (
    LEASE_MS,
    MODES,
    OVERLAP_COLUMNS,
    PROCESS_TIMEOUT_S,
    REPORT_MS,
    trace_counts,
    wait_for,
)
from course.labs.scheduled_tasks.params import ScheduledTasksParams
from jobs.management.commands.scheduledrun import probe_keys
from jobs.scheduler import schedule_redis


def probe_race(
    redis: Redis,
    run: str,
    labels: Sequence[str],
    *,
    locked: bool,
    hold_ms: int = REPORT_MS,
    lease_ms: int = LEASE_MS,
) -> list[str]:
    """Start a ``scheduledrun probe`` per label, release them at once, read the trace.

    Each process holds the lease ``probe_lease_name(run)`` (or no lock at all when
    ``locked`` is False) for ``hold_ms`` and appends ``started A`` / ``done A`` /
    ``skipped A``; the trace is returned in Redis order. Raises LabError when a
    process fails or does not finish. The run's keys are deleted however it ends.
    """
    keys = probe_keys(run)
    extra = () if locked else ("--unlocked",)
    processes = [
        start_manage(
            "scheduledrun",
            "--skip-checks",
            "probe",
            "--run",
            run,
            "--label",
            label,
            "--hold-ms",
            str(hold_ms),
            "--lease-ms",
            str(lease_ms),
            *extra,
        )
        for label in labels
    ]
    try:
        with running(*processes):
            wait_for(
                lambda: redis.llen(keys["ready"]) == len(labels),
                "the manage.py processes to boot",
                processes,
            )
            redis.rpush(keys["go"], *["go"] * len(labels))  # one signal per process
            for process in processes:
                if process.wait(timeout=PROCESS_TIMEOUT_S) != 0:
                    raise LabError(
                        f"live: a probe process exited with {process.returncode}; run "
                        "manage.py scheduledrun probe --run x --label A to see why"
                    )
        return [
            item.decode() if isinstance(item, bytes) else str(item)
            for item in redis.lrange(keys["trace"], 0, -1)
        ]
    except subprocess.TimeoutExpired:
        raise LabError("live: a probe process did not finish") from None
    finally:
        redis.delete(*keys.values())


@dataclass(frozen=True)
class Measurement:
    """Per mode, the trace's counts: (runs, skipped, concurrent peak)."""

    overlaps: list[tuple[str, tuple[int, int, int]]]


def _live_once(run: str, locked: bool) -> tuple[int, int, int]:
    return trace_counts(probe_race(schedule_redis(), run, ("A", "B"), locked=locked))


def measure(params: ScheduledTasksParams, progress: Progress) -> Measurement:
    """Race two real ``scheduledrun probe`` processes, unlocked and then locked."""
    run = new_run_id()
    overlaps = []
    for index, mode in enumerate(MODES):
        live_step(progress, 0.7 + 0.15 * index, f"two manage.py processes, {mode}")
        overlaps.append((mode, _live_once(f"{run}-{mode}", mode == "locked")))
    return Measurement(overlaps)


def tables(params: ScheduledTasksParams, measured: Measurement) -> Tables:
    """One row per mode, in the model's overlap columns."""
    rows: list[list[Cell]] = [[mode, *counts] for mode, counts in measured.overlaps]
    return {"live_overlap": table(OVERLAP_COLUMNS, rows)}


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
