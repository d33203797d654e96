"""Lab for "Delivery Semantics": the order of acknowledgement and effect decides.

Model part, two measurements:

1. ``modes`` — ``messages`` overdue notifications sit in an outbox. On the first pass
   the process dies half-way through the first attempt of every message listed in
   ``crashes``; a second pass (the restarted process) takes whatever is still
   pending. Three arrangements run the same workload:

   - ``at-most-once``: acknowledge, then send;
   - ``at-least-once``: send, then acknowledge;
   - ``deduplication``: send and record the message id in a guard table in one
     transaction, then acknowledge; a message already recorded is not sent again.

   The tables live in an in-memory SQLite database in autocommit mode, so a "death"
   rolls back exactly what an open transaction held, as in the lesson.
2. ``external`` — one message whose effect is a call to an outside service, which no
   database transaction can cover. The process dies between the two steps on the
   first pass. Fixed, as the course prints it.

A crash listed for a message id that does not exist never happens, as in the course,
where the crash set is only consulted for the messages being processed.
"""

from __future__ import annotations

from course.labs.delivery_semantics import live, model
from course.labs.delivery_semantics.params import PARAMS, DeliverySemanticsParams
from course.labs.harness.base import Chart, Lab

__all__ = ["LAB"]


LAB = Lab(
    slug="delivery-semantics",
    title="Delivery Semantics",
    params=PARAMS,
    params_type=DeliverySemanticsParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="modes",
            label="mode",
            values=("lost", "repeated"),
            title="Lost and repeated notifications per mode",
            unit="messages",
        ),
        Chart(
            table="modes",
            label="mode",
            values=("delivered", "effect"),
            title="Deliveries against notifications actually sent",
            unit="messages",
        ),
    ),
)
