"""Lab for "Streams versus Queues": a log that reading does not shrink.

Model part. The log is a real append-only file in a throwaway directory, one compact
JSON record per line. A record's offset is its position counted from the first record
ever appended, so it stays the same after older records are trimmed. Each consumer
keeps its own offset; reading never changes the file.

1. ``storage`` — six library events stored once in a single log and once copied into
   a file per subscription (three subscriptions). Bytes are the sizes on disk.
2. ``offsets`` — three consumers of that one log read a single round from offset 0,
   at 6, 4 and 1 records per round.
3. ``replay`` — six ``loan_issued`` events, first on a queue that deletes a message
   when it is acknowledged, then on the log. One consumer reads everything; then a
   second consumer asks for the whole history.
4. ``retention`` — ten events; notification has read all of them (offset 10), report
   is at offset 2. The log then keeps only its newest ``keep`` records.
   ``lost_by_report`` is the earliest remaining offset minus report's offset, the
   course's own subtraction: positive, it is the records report can no longer read;
   zero or negative (``keep`` of 8 or more), report still has that much margin.

Only ``retention`` depends on ``keep``; the other tables are the course's constants.
Extra tables: ``lag`` (log length after the round and how far report trails),
``log_head`` (the first lines of the log file), ``replay_state`` (what each model
still holds after the first consumer), ``rewind`` (a consumer moving its offset back
to 3), ``retention_log`` and ``retention_reads`` (the log and each read before and
after the trim).

Live part (``live.py``): storage and replay on the installation's outbox log and
its ``stock_projection`` consumer, retention on a throwaway log, in ``live_`` tables.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.streams_vs_queues import live, model
from course.labs.streams_vs_queues.params import PARAMS, StreamsVsQueuesParams

__all__ = ["LAB"]


LAB = Lab(
    slug="streams-vs-queues",
    title="Streams versus Queues",
    params=PARAMS,
    params_type=StreamsVsQueuesParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="storage",
            label="model",
            values=("bytes",),
            title="Bytes on disk for the same six events",
            unit="bytes",
        ),
        Chart(
            table="offsets",
            label="consumer",
            values=("offset",),
            title="Where each consumer stands after one round",
            unit="records",
        ),
        Chart(
            table="replay",
            label="model",
            values=("first_consumer", "later_consumer"),
            title="Records the first and a later consumer can read",
            unit="records",
        ),
    ),
)
