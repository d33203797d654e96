"""Lab for "Long-Running Jobs": chunks, a durable checkpoint, cancel and resume.

Model part, the lesson's experiment:

- ``records`` loans, loan ``i`` (1-based) out for ``i % 30`` days;
- the report adds up the days chunk by chunk (``chunk`` loans per round, taken by
  offset ``processed``, which advances by whole chunks as in the lesson's loop and
  may overshoot ``records`` on the last one), writes ``processed`` and the running
  total to the status record, *then* reports the percent (``Math.round``);
- the progress callback raises the cancel signal once the percent reaches
  ``cancel_at_pct``; the loop reads it at the top of the next round, so a signal
  raised on the last chunk is never seen and the run completes (status ``done``);
- a second run starts from the stored ``processed`` and total and completes.

Tables: ``cancelled`` (processed, total, status of the first run), ``resumed``
(processed, total, average_days = total / records, ``toFixed(2)``) and ``chunking``
(for chunk sizes 100, 500, 3000, 10000: ``ceil(records / chunk)`` progress writes and
a worst-case cancel delay of one chunk).

Live part: the real monthly loan report (``library.report``) on a real rq worker
process, over ``records`` loans of a throwaway branch (loan ``i`` out ``i % 30``
days, as in the model). It is cancelled through the page's Cancel path
(``library.report.report_cancel``, what the Cancel button's view calls) once its row
shows ``cancel_at_pct`` percent, resumed (``report_resume``, the Resume button's
path), and compared with an uninterrupted run over the same loans.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.long_running_jobs import live, model
from course.labs.long_running_jobs.params import PARAMS, LongRunningJobsParams

__all__ = ["LAB"]


LAB = Lab(
    slug="long-running-jobs",
    title="Long-Running Jobs",
    params=PARAMS,
    params_type=LongRunningJobsParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="chunking",
            label="chunk",
            values=("progress_writes",),
            title="Progress writes per chunk size",
        ),
    ),
    notes=(
        "The live part writes `records` throwaway loans (one temporary branch, "
        "deleted afterwards) and runs the real report on a real rq worker."
    ),
)
