"""The parameters of the streaming-responses lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``StreamingResponsesParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = (
    Param("lines", "int", 10, "report lines", minimum=0, maximum=200, work="value"),
    Param("line_ms", "int", 100, "time to make one line (ms)", minimum=0, maximum=2000),
)


@dataclass(frozen=True)
class StreamingResponsesParams(LabParams):
    """The lab's parameters, one typed field each."""

    lines: int
    line_ms: int


def under_a_minute(params: StreamingResponsesParams) -> str | None:
    """Refuse a report whose lines take a minute or more to make."""
    if params.lines * params.line_ms > 60_000:
        return "lines * line_ms must stay under 60 s"
    return None
