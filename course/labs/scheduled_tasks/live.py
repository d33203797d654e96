"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import subprocess

from course.instruments.processes import running, start_manage
from course.labs.harness.base import (
    Cell,
    LabError,
    Params,
    Progress,
    Tables,
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
from jobs.management.commands.scheduledrun import probe_keys
from jobs.scheduler import schedule_redis


def _live_once(run: str, locked: bool) -> tuple[int, int, int]:

    redis = schedule_redis()
    keys = probe_keys(run)
    extra = () if locked else ("--unlocked",)
    processes = [
        start_manage(
            "scheduledrun",
            "probe",
            "--run",
            run,
            "--label",
            label,
            "--hold-ms",
            str(REPORT_MS),
            "--lease-ms",
            str(LEASE_MS),
            *extra,
        )
        for label in ("A", "B")
    ]
    try:
        with running(*processes):
            wait_for(
                lambda: redis.llen(keys["ready"]) == 2,
                "both manage.py processes to boot",
                processes,
            )
            redis.rpush(keys["go"], "go", "go")  # one signal per process
            for process in processes:
                if process.wait(timeout=PROCESS_TIMEOUT_S) != 0:
                    raise LabError(
                        f"live: a probe process exited with {process.returncode}; run "
                        "manage.py scheduledrun probe --run x --label A to see why"
                    )
        lines = [
            item.decode() if isinstance(item, bytes) else str(item)
            for item in redis.lrange(keys["trace"], 0, -1)
        ]
    except subprocess.TimeoutExpired:
        raise LabError("live: a probe process did not finish") from None
    finally:
        redis.delete(*keys.values())
    return trace_counts(lines)


def live(params: Params, progress: Progress) -> Tables:

    run = new_run_id()
    rows: list[list[Cell]] = []
    for index, mode in enumerate(MODES):
        live_step(progress, 0.7 + 0.15 * index, f"two manage.py processes, {mode}")
        rows.append([mode, *_live_once(f"{run}-{mode}", mode == "locked")])
    return {"live_overlap": table(OVERLAP_COLUMNS, rows)}
