"""Lab for "Dead-Letter Queues": isolating the messages that will never succeed.

Model part:

1. ``retry`` — ``messages`` overdue notifications, of which the ids in ``permanent``
   fail on every attempt. Each round hands every pending message out once and
   raises its attempt counter before the work. Three settings, as the course runs
   them: no threshold for 8 rounds, no threshold for 24 rounds, and ``threshold``
   attempts for 8 rounds; a message failing its ``threshold``-th attempt moves to
   the dead-letter table.
2. ``selection`` — the same number of messages, each needing a fixed number of
   attempts: never for the permanent ids, 5 for multiples of 5, 3 for other
   multiples of 3, 1 for the rest. For each of ``thresholds``: how much work is
   done, how many attempts fail, and how many messages end up isolated wrongly (they
   would have succeeded later) or rightly (they never would).

Extra tables: ``retry_settings`` (the retry rows under distinct labels, for the
chart), ``selection_workload`` (how many messages need how many attempts),
``dead_letters`` (the records a ``threshold``-round drain leaves, with
everything a redrive needs) and ``redrive`` (the same drain, the cause fixed, the
records sent back with reset counters and drained again).

The queue and the dead-letter records live in an in-memory SQLite database; a record
keeps the body, type, attempt count, last error and source queue. Ids in
``permanent`` above ``messages`` name no message and change nothing, as in the
course, which only looks the set up for existing messages.
"""

from __future__ import annotations

from course.labs.dead_letter_queues import live, model
from course.labs.dead_letter_queues.params import PARAMS, DeadLetterQueuesParams
from course.labs.harness.base import Chart, Lab

__all__ = ["LAB"]


LAB = Lab(
    slug="dead-letter-queues",
    title="Dead-Letter Queues",
    params=PARAMS,
    params_type=DeadLetterQueuesParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="retry_settings",
            label="setting",
            values=("wasted", "remaining_depth", "dead_letters"),
            title="Wasted attempts and what is left after each setting",
            unit="messages",
        ),
        Chart(
            table="selection",
            label="threshold",
            values=("wasted_attempts", "wrongly_isolated"),
            title="Threshold: wasted attempts against wrongful isolation",
            unit="messages",
        ),
    ),
)
