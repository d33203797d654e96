"""Lab for "Polling Approaches": one event met by short and by long polling.

Model part: the lesson's measuring script against ``polling.mjs``. Short polling
asks five times before the job advances and once after: six requests, five empty.
Long polling opens a wait at version 0, the job advances 300 ms later (the script's
``sleep 0.3``), and a second wait at version 1 runs out its hold: two requests, one
empty. With ``hold_ms`` at or below those 300 ms the first wait runs out before the
advance, so both waits come back empty, as the lesson's server would answer. The
``cost`` table is the lesson's arithmetic for one event in a sixty-second window:
short polling asks ``window / interval`` times and all but one answer are empty;
long polling asks ``window / hold + events`` times, and ``window / hold - events``
holds run out.

Live part: the same questions asked of this project's endpoints on a daphne the lab
starts (``/realtime/jobs/<id>/status`` and ``/wait``) with a job of its own, advanced
by ``jobs.services.jobstatus_progress`` as a worker would. The request and empty
counts come from the server's own counters in Redis (deltas around the run).
"""

from __future__ import annotations

import threading
import time
from typing import Final

from course.labs.harness.base import (
    Cell,
    Chart,
    Lab,
    LabError,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.harness.live import live_step
from course.labs.harness.live_http import client_for, daphnes
from jobs.models import JobStatus
from jobs.services import jobstatus_create, jobstatus_progress
from realtime.polling import counters_read

ADVANCE_AFTER_MS: Final = 300  # the script's sleep 0.3 before /advance
SHORT_POLLS_BEFORE: Final = 5
WINDOW_S: Final = 60
EVENTS: Final = 1
COST_ROWS: Final = (
    ("Short polling, 1 s interval", "short", 1, "1 s"),
    ("Short polling, 5 s interval", "short", 5, "5 s"),
    ("Long polling, 30 s hold", "long", 30, "network latency"),
)


def short_polling() -> tuple[int, int]:
    """Return (requests, empty) of the script's short-polling half."""
    requests = SHORT_POLLS_BEFORE + 1
    return requests, SHORT_POLLS_BEFORE


def long_polling(hold_ms: int) -> tuple[int, int]:
    """Return (requests, empty) of the script's long-polling half."""
    # The first wait gets the advance only if its hold outlasts the 300 ms.
    first_empty = 1 if hold_ms <= ADVANCE_AFTER_MS else 0
    # The second wait asks at version 1: nothing newer comes, its hold runs out.
    return 2, first_empty + 1


def cost(kind: str, every_s: int) -> tuple[int, int]:
    """Return (requests, empty) in the window for one event (the lesson's sums)."""
    if kind == "short":
        requests = WINDOW_S // every_s
        return requests, requests - EVENTS
    holds = WINDOW_S // every_s
    return holds + EVENTS, holds - EVENTS


def model(params: Params, progress: Progress) -> Tables:
    hold_ms = int_param(params, "hold_ms")
    progress(0.2, "short and long polling of one event")
    short = short_polling()
    long = long_polling(hold_ms)
    rows: list[list[Cell]] = [
        ["short polling", short[0], short[1]],
        ["long polling", long[0], long[1]],
    ]
    progress(0.6, "cost over a sixty-second window")
    cost_rows: list[list[Cell]] = []
    for label, kind, every, latency in COST_ROWS:
        requests, empty = cost(kind, every)
        cost_rows.append([label, WINDOW_S, requests, empty, latency])
    return {
        "requests": table(["approach", "requests", "empty_responses"], rows),
        "cost": table(
            ["approach", "window_s", "requests", "empty_responses", "worst_latency"],
            cost_rows,
        ),
    }


# --- live ----------------------------------------------------------------------


def live(params: Params, progress: Progress) -> Tables:

    hold_ms = int_param(params, "hold_ms")
    job = jobstatus_create(kind="lab", name="polling-approaches-live", params={})
    try:
        with daphnes(progress, ["on"]) as servers, client_for(servers[0]) as client:
            status = f"/realtime/jobs/{job.pk}/status"
            wait = f"/realtime/jobs/{job.pk}/wait"
            live_step(progress, 0.3, "short polling: six requests")
            before = counters_read()
            short_statuses = [
                client.get(status, params={"version": 1}).status_code
                for _ in range(SHORT_POLLS_BEFORE)
            ]
            jobstatus_progress(job_id=job.pk, progress=10)  # version 2
            short_statuses.append(client.get(status, params={"version": 1}).status_code)
            middle = counters_read()
            live_step(progress, 0.6, "long polling: two requests")

            def advance() -> None:
                time.sleep(ADVANCE_AFTER_MS / 1000)
                jobstatus_progress(job_id=job.pk, progress=20)  # version 3

            worker = threading.Thread(target=advance)
            worker.start()
            started = time.monotonic()
            first = client.get(wait, params={"version": 2, "timeout_ms": hold_ms})
            first_ms = (time.monotonic() - started) * 1000
            worker.join()
            started = time.monotonic()
            second = client.get(wait, params={"version": 3, "timeout_ms": hold_ms})
            second_ms = (time.monotonic() - started) * 1000
            after = counters_read()
    finally:
        JobStatus.objects.filter(pk=job.pk).delete()
    for response in (first, second):
        if response.status_code not in (200, 204):
            raise LabError(f"live: the long poll answered {response.status_code}")
    rows: list[list[Cell]] = [
        [
            "short polling",
            middle["short_requests"] - before["short_requests"],
            middle["short_empty"] - before["short_empty"],
        ],
        [
            "long polling",
            after["long_requests"] - middle["long_requests"],
            after["long_empty"] - middle["long_empty"],
        ],
    ]
    timing: list[list[Cell]] = [
        ["short polling", " ".join(str(s) for s in short_statuses), None],
        ["long polling, first wait", str(first.status_code), round(first_ms)],
        ["long polling, second wait", str(second.status_code), round(second_ms)],
    ]
    return {
        "live_requests": table(["approach", "requests", "empty_responses"], rows),
        "live_answers": table(["request", "statuses", "held_ms"], timing),
    }


LAB = Lab(
    slug="polling-approaches",
    title="Polling Approaches",
    params=(
        Param(
            "hold_ms",
            "int",
            1000,
            "how long a long poll is held before 204 (ms)",
            minimum=1,
            maximum=30_000,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="cost",
            label="approach",
            values=("requests", "empty_responses"),
            title="Requests for one event in a minute",
            unit="requests",
        ),
    ),
    notes=(
        "The live part starts a daphne of this project and polls a job of its own "
        "through /realtime/jobs/<id>/status and /wait; counts are the server's."
    ),
)
