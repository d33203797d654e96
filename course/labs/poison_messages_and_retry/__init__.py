"""Lab for "Poison Messages and Retry": counter placement, backoff and jitter.

Model part, four measurements:

1. ``counter_position`` — five messages, the third kills the consumer process; the
   process is restarted up to twelve times. With the attempt counter raised in the
   error handler the handler never runs, so the threshold of three is never reached;
   raised on delivery, the third delivery isolates the message before the work.
   Fixed, as the course prints it.
2. ``schedule`` — the wait before attempts 1 to 8 under four schedules (none, a fixed
   2 s, ``base_ms * 2**(n-1)``, and the same capped at ``cap_ms``) and their sums.
3. ``budget`` — how many attempts fit in ``budget_ms`` of waiting under each schedule
   (``unlimited`` when a thousand fit) and the wait used by then.
4. ``jitter`` — ``consumers`` consumers fail at the same instant and retry
   ``attempts`` times; their retry moments are counted per ``bucket_ms`` slot with no
   jitter, full jitter and decorrelated jitter, drawing from the course's generator
   seeded with ``seed``.

The capped exponential wait is the system's own policy, ``messaging.policies.Backoff``.
The system's ``full_jitter_ms`` truncates its draw, while the course rounds half up,
so the jitter experiment draws its waits here on top of ``Backoff.delay_ms``.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.poison_messages_and_retry import live, model
from course.labs.poison_messages_and_retry.model import check_wave_size
from course.labs.poison_messages_and_retry.params import (
    PARAMS,
    PoisonMessagesParams,
)

__all__ = ["LAB"]


LAB = Lab(
    slug="poison-messages-and-retry",
    title="Poison Messages and Retry",
    params=PARAMS,
    params_type=PoisonMessagesParams,
    model=model.model,
    live=live.LIVE,
    combination_check=check_wave_size,
    charts=(
        Chart(
            table="jitter",
            label="schedule",
            values=("peak_per_bucket",),
            title="Busiest slot of the retry wave",
            unit="requests",
        ),
        Chart(
            table="jitter",
            label="schedule",
            values=("filled_buckets",),
            title="Slots the retry wave is spread over",
            unit="slots",
        ),
        Chart(
            table="counter_position",
            label="position",
            values=("deaths", "processed", "dead_letters", "remaining"),
            title="Where the attempt counter is raised",
            unit="count",
        ),
    ),
)
