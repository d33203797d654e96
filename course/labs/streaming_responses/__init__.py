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

from course.labs.harness.base import Chart, Lab
from course.labs.streaming_responses import live, model
from course.labs.streaming_responses.params import (
    PARAMS,
    StreamingResponsesParams,
    under_a_minute,
)

__all__ = ["LAB"]


LAB = Lab(
    slug="streaming-responses",
    title="Streaming Responses",
    params=PARAMS,
    params_type=StreamingResponsesParams,
    model=model.model,
    live=live.LIVE,
    combination_check=under_a_minute,
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
