"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Final

from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.queueing import (
    MILLISECONDS,
    UNSTABLE,
    bounded_columns,
    bounded_rows,
    scenario_of,
)
from course.labs.load_shedding.params import LoadSheddingParams

MODES: Final = ("unbounded", "controlled")
COLUMNS: Final = ["mode", "status", "latency_slices", "count"]
# The queue budget of the lab's servers: long enough that nothing expires.
LAB_BUDGET_MS: Final = 600_000
VARIABILITY_COLUMNS: Final = bounded_columns(
    MILLISECONDS, drop="shed_pct", wait="controlled_p99_wait_ms"
)
UNSTABLE_UNBOUNDED: Final = (
    "the unbounded server is " + UNSTABLE + "; the controlled one stays stable "
    "by shedding"
)


def serve(
    requests: int, *, max_concurrent: int, max_queue: int | None, job_ms: int
) -> list[tuple[int, int]]:
    """Return (status, latency ms) per request of admission.mjs (None: unbounded)."""
    finishes: list[int] = []  # finish instants of the jobs started so far
    answers: list[tuple[int, int]] = []
    queued = 0
    for _ in range(requests):
        if len(finishes) < max_concurrent:
            finishes.append(job_ms)
            answers.append((200, job_ms))
        elif max_queue is None or queued < max_queue:
            queued += 1
            # A queued job starts when the earliest running or queued one ends.
            finishes.sort()
            start = finishes[len(finishes) - max_concurrent]
            finishes.append(start + job_ms)
            answers.append((200, start + job_ms))
        else:
            answers.append((503, 0))
    return answers


def summarize(mode: str, answers: Sequence[tuple[int, float]]) -> list[list[Cell]]:
    """Group (status, latency ms) the way ``awk | LC_ALL=C sort | uniq -c`` does."""
    counts = Counter(
        f"status={status}  latency={int(ms // 100):2d} slice" for status, ms in answers
    )
    rows: list[list[Cell]] = []
    for line in sorted(counts):
        status = int(line.split()[0].removeprefix("status="))
        slices = int(line.split("latency=")[1].split()[0])
        rows.append([mode, status, slices, counts[line]])
    return rows


def variability(params: LoadSheddingParams) -> list[list[Cell]]:
    """The variability rows: ``max_concurrent`` places, jobs of ``job_ms``."""
    scenario = scenario_of(
        params,
        servers=params.max_concurrent,
        mean_service=float(params.job_ms),
    )
    return bounded_rows(
        scenario,
        params.utilisations,
        MILLISECONDS,
        capacity=params.max_queue,
        unstable_note=UNSTABLE_UNBOUNDED,
    )


def model(params: LoadSheddingParams, progress: Progress) -> Tables:
    requests = params.requests
    concurrent = params.max_concurrent
    job_ms = params.job_ms
    rows: list[list[Cell]] = []
    for mode in MODES:
        progress(0.5 if mode == "controlled" else 0.0, f"{mode} server")
        limit = None if mode == "unbounded" else params.max_queue
        answers = serve(
            requests, max_concurrent=concurrent, max_queue=limit, job_ms=job_ms
        )
        rows += summarize(mode, [(status, float(ms)) for status, ms in answers])
    progress(0.8, "variability: random arrivals and job lengths")
    return {
        "latency": table(COLUMNS, rows),
        "variability": table(VARIABILITY_COLUMNS, variability(params)),
    }
