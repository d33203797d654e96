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

from course.labs.harness.base import Chart, Lab
from course.labs.polling_approaches import live, model
from course.labs.polling_approaches.params import PARAMS, PollingApproachesParams

__all__ = ["LAB"]


LAB = Lab(
    slug="polling-approaches",
    title="Polling Approaches",
    params=PARAMS,
    params_type=PollingApproachesParams,
    model=model.model,
    live=live.LIVE,
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
