"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

from typing import Final

from course.labs.harness.base import (
    Progress,
    Tables,
    table,
)
from course.labs.streaming_responses.params import StreamingResponsesParams

TIMING_COLUMNS: Final = ["form", "first_byte_slices", "total_slices"]
FRAMING_COLUMNS: Final = ["form", "header"]
CUT_COLUMNS: Final = ["status", "last_line"]
CUT_AT: Final = 4  # chunked.mjs fails before writing this line


def make_line(index: int) -> str:
    """Return chunked.mjs's line ``index``: ``01;branch-2;loan=43``."""
    return f"{index:02d};branch-{1 + index % 3};loan={40 + index * 3}\n"


def slices(ms: float) -> int:
    return int(ms / 100)


def model(params: StreamingResponsesParams, progress: Progress) -> Tables:
    lines = params.lines
    line_ms = params.line_ms
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
