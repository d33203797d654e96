"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from course.labs.harness.base import (
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live_http import client_for, daphnes
from course.labs.streaming_responses.model import (
    CUT_AT,
    CUT_COLUMNS,
    FRAMING_COLUMNS,
    TIMING_COLUMNS,
)
from course.labs.streaming_responses.params import StreamingResponsesParams


def _timed(
    client: httpx.Client, query: dict[str, str | int]
) -> tuple[float, float, str]:
    """Return (first body byte s, end s, framing header) of one report request."""
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


@dataclass(frozen=True)
class Form:
    """One form of the report as the client received it."""

    label: str
    first_byte_s: float
    end_s: float
    framing: str  # the header that says how the body is delimited


@dataclass(frozen=True)
class Measurement:
    forms: list[Form]
    cut_status: int
    cut_body: str  # the report that failed midway, as it came


def measure(params: StreamingResponsesParams, progress: Progress) -> Measurement:
    """Time the buffered and the streamed report on a real daphne; cut one midway."""
    query: dict[str, str | int] = {
        "month": "2026-01",
        "lab_lines": params.lines,
        "line_ms": params.line_ms,
    }
    lab_routes = {"LIBRARY_LAB_ROUTES": "on"}
    with (
        daphnes(progress, ["on"], env=lab_routes) as (server,),
        client_for(server) as client,
    ):
        # A server's first request also pays for loading the URLconf and opening a
        # database connection; an empty report takes that cost out of the timings.
        client.get("/realtime/reports/loans.csv", params={**query, "lab_lines": 0})
        forms: list[Form] = []
        for form, label in (("buffered", "full"), ("stream", "streaming")):
            progress(0.3 if form == "buffered" else 0.6, f"live: {label} form")
            first, end, header = _timed(client, {**query, "form": form})
            forms.append(Form(label, first, end, header))
        progress(0.85, "live: report failing after 3 lines")
        cut = client.get(
            "/realtime/reports/loans.csv",
            params={**query, "line_ms": 0, "fail_after": CUT_AT - 1},
        )
    return Measurement(forms, cut.status_code, cut.text)


def tables(params: StreamingResponsesParams, measured: Measurement) -> Tables:
    """Times in the lesson's 100 ms slices, the framing, the cut report's end."""
    last = measured.cut_body.rstrip("\n").rsplit("\n", 1)[-1]
    return {
        "live_timing": table(
            TIMING_COLUMNS,
            [
                [form.label, int(form.first_byte_s * 10), int(form.end_s * 10)]
                for form in measured.forms
            ],
        ),
        "live_framing": table(
            FRAMING_COLUMNS, [[form.label, form.framing] for form in measured.forms]
        ),
        "live_cut": table(CUT_COLUMNS, [[measured.cut_status, last]]),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
