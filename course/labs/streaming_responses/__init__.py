"""Lab for "Streaming Responses": first byte, framing, and a report cut midway.

Model part: the lesson's ``chunked.mjs`` on a virtual clock. ``lines`` lines, each
made ``line_ms`` after the previous one. The buffered form (``/full``) sends
everything at the end with a Content-Length; the streamed form sends each line
as it is made, chunked. Times are in 100 ms slices cut as the lesson's awk does
(``int(seconds * 10)``): with the defaults, first byte at 10 vs 1 slice, total 10
for both, ``content-length: 200`` vs ``Transfer-Encoding: chunked``, and the cut
report (failing at line 4) keeps status 200 and ends with the error line.

Live part: our daphne's report view (``/realtime/reports/loans.csv``) with the
lab-only synthetic source (``lab_lines``, ``line_ms``, ``fail_after``; the
daphne runs with ``LIBRARY_LAB_ROUTES=on``), which yields the lesson's lines
through the same async generator, markers and response as the loan report.
Measured with httpx from this process: the first *body* byte and the end, in
slices; the framing header daphne sent; the cut form's status and last line.
Our body also ends with a completion marker (``# complete: N rows``) that the
lesson recommends and its server does not write.
"""

from __future__ import annotations

import time
from typing import Final

from course.labs.harness.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.harness.live_http import client_for, daphnes

TIMING_COLUMNS: Final = ["form", "first_byte_slices", "total_slices"]
FRAMING_COLUMNS: Final = ["form", "header"]
CUT_COLUMNS: Final = ["status", "last_line"]
CUT_AT: Final = 4  # chunked.mjs fails before writing this line


def make_line(index: int) -> str:
    """Return chunked.mjs's line ``index``: ``01;branch-2;loan=43``."""
    return f"{index:02d};branch-{1 + index % 3};loan={40 + index * 3}\n"


def slices(ms: float) -> int:
    return int(ms / 100)


def model(params: Params, progress: Progress) -> Tables:
    lines = int_param(params, "lines")
    line_ms = int_param(params, "line_ms")
    end_ms = lines * line_ms
    first_stream_ms = line_ms if lines else end_ms
    body = "".join(make_line(i) for i in range(1, lines + 1))
    cut = [make_line(i) for i in range(1, min(lines, CUT_AT - 1) + 1)]
    if lines >= CUT_AT:
        cut.append(f"#error;report cut off midway;line={CUT_AT - 1}\n")
    return {
        "timing": table(
            TIMING_COLUMNS,
            [
                ["full", slices(end_ms), slices(end_ms)],
                ["streaming", slices(first_stream_ms), slices(end_ms)],
            ],
        ),
        "framing": table(
            FRAMING_COLUMNS,
            [
                ["full", f"content-length: {len(body.encode())}"],
                ["streaming", "Transfer-Encoding: chunked"],
            ],
        ),
        "cut": table(CUT_COLUMNS, [[200, cut[-1].rstrip("\n") if cut else ""]]),
    }


# --- live ----------------------------------------------------------------------------


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


LAB = Lab(
    slug="streaming-responses",
    title="Streaming Responses",
    params=(
        Param("lines", "int", 10, "report lines", minimum=0, maximum=200),
        Param(
            "line_ms", "int", 100, "time to make one line (ms)", minimum=0, maximum=2000
        ),
    ),
    model=model,
    live=live,
    combination_check=lambda p: (
        "lines * line_ms must stay under 60 s"
        if int_param(p, "lines") * int_param(p, "line_ms") > 60_000
        else None
    ),
    charts=(
        Chart(
            "timing",
            "form",
            ("first_byte_slices", "total_slices"),
            "First byte and total time",
            unit="100 ms slices",
        ),
    ),
)
