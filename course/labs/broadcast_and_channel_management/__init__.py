"""Lab for "Broadcast and Channel Management": does a broadcast reach other instances?

Model part: the lesson's ``instance.mjs`` and ``relay.mjs`` counted without
sockets. The subscriber sits on the last of ``instances`` instances and the
broadcast arrives at the first. Without a relay the first instance delivers only
to its own (absent) subscribers: the subscriber sees nothing and the relay counts
nothing. With the relay, one broadcast becomes one copy per connected instance
(the sender included), and the subscriber sees one message. With two instances
this is the course's table: 0/0/0 and 1/1/2.

Live part: ``instances`` real daphne processes of this project, started twice:
with channels' in-process layer (``LIBRARY_CHANNEL_LAYER=memory``) and with the
Redis layer. One WebSocket subscriber on each instance but the first listens to
the first branch's group; the lab-only route ``POST /_lab/broadcast/<id>/`` makes
the first instance broadcast through ``realtime.broadcast.broadcasts_send``.
``subscriber_saw`` counts updates the subscribers received within
``WAIT_S``; ``broadcasts`` and ``copies`` are the deltas of the group's counters
(``realtime:broadcasts``, and ``realtime:deliveries``: frames the consumers
wrote). The in-process layer keeps the message on the first instance: one
broadcast, no copy. Other traffic on that branch during the run (a loan at the
desk) would be counted too.
"""

from __future__ import annotations

from course.labs.broadcast_and_channel_management import live, model
from course.labs.broadcast_and_channel_management.params import (
    PARAMS,
    BroadcastParams,
)
from course.labs.harness.base import Chart, Lab

__all__ = ["LAB"]


LAB = Lab(
    slug="broadcast-and-channel-management",
    title="Broadcast and Channel Management",
    params=PARAMS,
    params_type=BroadcastParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            "delivery",
            "mode",
            ("subscriber_saw", "broadcasts", "copies"),
            "What one broadcast became",
        ),
    ),
)
