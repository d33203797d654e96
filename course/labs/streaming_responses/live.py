"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import time

from course.labs.harness.base import (
    Cell,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.harness.live_http import client_for, daphnes
from course.labs.streaming_responses.model import (
    CUT_AT,
    CUT_COLUMNS,
    FRAMING_COLUMNS,
    TIMING_COLUMNS,
)


def _measure(client: object, query: dict[str, str | int]) -> tuple[float, float, str]:
    """Return (first body byte s, end s, framing header) of one report request."""
    import httpx

    assert isinstance(client, httpx.Client)
    started = time.monotonic()
    first: float | None = None
    with client.stream("GET", "/realtime/reports/loans.csv", params=query) as response:
        for _ in response.iter_raw():
            if first is None:
                first = time.monotonic() - started
        ended = time.monotonic() - started
        if "content-length" in response.headers:
            header = f"content-length: {response.headers['content-length']}"
        else:
            header = f"Transfer-Encoding: {response.headers.get('transfer-encoding')}"
    return first if first is not None else ended, ended, header


def live(params: Params, progress: Progress) -> Tables:

    lines = int_param(params, "lines")
    line_ms = int_param(params, "line_ms")
    query: dict[str, str | int] = {
        "month": "2026-01",
        "lab_lines": lines,
        "line_ms": line_ms,
    }
    lab_routes = {"LIBRARY_LAB_ROUTES": "on"}
    with (
        daphnes(progress, ["on"], env=lab_routes) as (server,),
        client_for(server) as client,
    ):
        # A server's first request also pays for loading the URLconf and opening a
        # database connection; an empty report takes that cost out of the timings.
        client.get("/realtime/reports/loans.csv", params={**query, "lab_lines": 0})
        timing: list[list[Cell]] = []
        framing: list[list[Cell]] = []
        for form, label in (("buffered", "full"), ("stream", "streaming")):
            progress(0.3 if form == "buffered" else 0.6, f"live: {label} form")
            first, end, header = _measure(client, {**query, "form": form})
            timing.append([label, int(first * 10), int(end * 10)])
            framing.append([label, header])
        progress(0.85, "live: report failing after 3 lines")
        cut = client.get(
            "/realtime/reports/loans.csv",
            params={**query, "line_ms": 0, "fail_after": CUT_AT - 1},
        )
    last = cut.text.rstrip("\n").rsplit("\n", 1)[-1]
    return {
        "live_timing": table(TIMING_COLUMNS, timing),
        "live_framing": table(FRAMING_COLUMNS, framing),
        "live_cut": table(CUT_COLUMNS, [[cut.status_code, last]]),
    }
