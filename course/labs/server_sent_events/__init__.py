"""Lab for "Server-Sent Events": a stream cut, then resumed with Last-Event-ID.

Model part: the lesson's ``sse.mjs`` and its reading script. The server has six
events (ids 1 to 6); the first connection is cut after ``cut`` events (0: not cut);
the second connection sends the id of the last event the client received as
``Last-Event-ID`` (what a reconnecting ``EventSource`` sends; the lesson writes the
3 it saw) and gets every later event. ``stream`` has one row per connection: the
events it carried and the last id the client holds after it; ``totals`` the sums.

Live part: the same exchange with this project's branch stream
(``/realtime/branches/<id>/events``) on a daphne the lab starts. Six real outbox
messages are written while the lab follows, by ``library.services.stock_correct``
setting a book's shelf count to the count it already has (a recount: the number
on the shelf does not change). The first ``cut`` are written while the first
connection is open and read from it; the client then closes it; the rest are written
with nobody listening and come back on the second connection, replayed from the
outbox log after the offset the client sends. ``last_event_id`` is the real log
offset; ``events_held`` counts the run's events the client has, the course's ids.
The connection and event counts are the server's own counters (Redis deltas).
``live_transcript`` is what both connections read, line by line as the bytes came:
the ``retry:`` line, heartbeat comments, and each event's ``id:``, ``event:`` and
``data:`` lines with the blank line that ends it.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.server_sent_events import live, model
from course.labs.server_sent_events.params import PARAMS, ServerSentEventsParams

__all__ = ["LAB"]


LAB = Lab(
    slug="server-sent-events",
    title="Server-Sent Events",
    params=PARAMS,
    params_type=ServerSentEventsParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="stream",
            label="connection",
            values=("events",),
            title="Events per connection",
            unit="events",
        ),
    ),
    transcripts=("live_transcript",),
    notes=(
        "The live part starts a daphne of this project and follows a branch's "
        "event stream; the six events are real outbox messages (shelf recounts)."
    ),
)
