"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step
from course.labs.harness.live_http import client_for, daphnes
from course.labs.polling_approaches.model import ADVANCE_AFTER_MS, SHORT_POLLS_BEFORE
from course.labs.polling_approaches.params import PollingApproachesParams
from jobs.models import JobStatus
from jobs.services import jobstatus_create, jobstatus_progress
from realtime.polling import counters_read


@dataclass(frozen=True)
class Measurement:
    """The statuses the client got and the server's own poll counters."""

    short_statuses: list[int]
    long_statuses: list[int]  # the first wait, then the second
    long_held_ms: list[float]
    before: dict[str, int]  # the server's counters before short polling,
    middle: dict[str, int]  # between short and long polling,
    after: dict[str, int]  # and after long polling


def measure(params: PollingApproachesParams, progress: Progress) -> Measurement:
    """Poll a real job's status short, then long, from a real daphne."""
    hold_ms = params.hold_ms
    job = jobstatus_create(kind="lab", name="polling-approaches-live", params={})
    try:
        # A lab server (LAB_ROUTES): the lab's own job is readable without signing
        # in there, as nowhere else (jobs.access).
        lab_server = {"LIBRARY_LAB_ROUTES": "on"}
        with (
            daphnes(progress, ["on"], env=lab_server) as servers,
            client_for(servers[0]) as client,
        ):
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
    return Measurement(
        short_statuses=short_statuses,
        long_statuses=[first.status_code, second.status_code],
        long_held_ms=[first_ms, second_ms],
        before=dict(before),
        middle=dict(middle),
        after=dict(after),
    )


def tables(params: PollingApproachesParams, measured: Measurement) -> Tables:
    """Requests and empty answers per approach; what each request got, how late."""
    before, middle, after = measured.before, measured.middle, measured.after
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
    first, second = measured.long_statuses
    first_ms, second_ms = measured.long_held_ms
    timing: list[list[Cell]] = [
        ["short polling", " ".join(str(s) for s in measured.short_statuses), None],
        ["long polling, first wait", str(first), round(first_ms)],
        ["long polling, second wait", str(second), round(second_ms)],
    ]
    return {
        "live_requests": table(["approach", "requests", "empty_responses"], rows),
        "live_answers": table(["request", "statuses", "held_ms"], timing),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
