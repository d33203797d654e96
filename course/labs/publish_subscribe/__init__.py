"""Lab for "Publish-Subscribe": one publish call, one copy per subscription.

Model part, on an in-memory topic. Every subscription owns a delivery queue; a
publish drops one copy into each subscription whose filter accepts the message type.
There is no real clock: on each ``advance`` every subscription gets the same budget of
time units and spends its own per-message cost until the budget or its queue runs out,
so one subscription's pace never touches another's.

1. ``fan_out`` — four ``loan_issued`` events published once to one, two, three and
   four subscribers, then everything drained. The producer's calls stay at four;
   copies and deliveries grow with the subscriber count. Fixed, as printed.
2. ``slow_subscriber`` — notification and stock-summary cost one unit per message,
   report ``slow_duration``. Each of ``rounds`` rounds publishes ``per_round`` events
   and then gives every subscription ``budget`` units. One row per round with
   ``processed/pending`` for each subscription.
3. ``filter`` — eight events of mixed types, once with every subscription taking
   everything and once with a type filter per subscription; a rejected type is never
   copied. Fixed, as printed.
4. ``late_subscriber`` — three events reach two subscribers, then search-index
   subscribes and two more are published: it never receives the first three.
   Fixed, as printed.

Extra tables: ``backlog`` (the pending counts of ``slow_subscriber`` as numbers, for
the chart) and ``late_subscriber_steps`` (processed counts after each stage; ``None``
where search-index did not exist yet).

Live part (``live.py``): the same four questions asked of the outbox and its real
subscriptions on real rq worker processes, in tables prefixed ``live_``.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.publish_subscribe import live, model
from course.labs.publish_subscribe.params import PARAMS, PublishSubscribeParams

__all__ = ["LAB"]


LAB = Lab(
    slug="publish-subscribe",
    title="Publish\u2013Subscribe",
    params=PARAMS,
    params_type=PublishSubscribeParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="backlog",
            label="round",
            values=("notification", "stock_summary", "report"),
            title="Messages pending in each subscription after every round",
            unit="messages",
        ),
        Chart(
            table="fan_out",
            label="subscribers",
            values=("publish_calls", "copies"),
            title="Publish calls against copies carried",
            unit="messages",
        ),
        Chart(
            table="filter",
            label="filter",
            values=("copies", "notification", "stock_summary", "report"),
            title="Copies and deliveries without and with a type filter",
            unit="messages",
        ),
    ),
)
