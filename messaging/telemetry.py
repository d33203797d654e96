"""What the messaging spine reports: outbox lag, backlog, throughput, dead letters.

Registered from ``MessagingConfig.ready``: the series of the operations history, the
sampler that fills them once a minute, and the Prometheus families (read live from
the database at each scrape: it is the source of truth for every message).

Throughput and dead letters are not counted at the event but recounted from the
rows' indexed timestamps (``done_at``, ``last_failed_at``) over the last
``TALLY_MINUTES`` minutes at every sample: the database already records each one,
a recount is idempotent, and a delivery committed just after a sample is still
counted in its own minute by the next one.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Final

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from jobs.exposition import PREFIX, exposition_register
from jobs.series import (
    Kind,
    Sample,
    SeriesSpec,
    sampler_register,
    series_define,
    series_read,
)
from messaging.models import DeadLetter, Delivery
from messaging.registry import SUBSCRIPTIONS
from messaging.selectors.overview import dead_letter_open_count, outbox_lag
from messaging.selectors.throughput import (
    dead_letters_per_minute,
    deliveries_done_per_minute,
    subscription_backlog,
)

__all__ = [
    "DEAD_LETTERS_NEW",
    "DEAD_LETTERS_OPEN",
    "DELIVERIES_DONE",
    "DELIVERIES_DUE",
    "OUTBOX_LAG",
    "OUTBOX_UNRELAYED",
    "TALLY_MINUTES",
    "telemetry_register",
]

# The current minute and the five before it are recounted at every sample.
TALLY_MINUTES: Final = 6
DONE_WINDOW_MINUTES: Final = 5
LAG_RELAY: Final = "oldest unrelayed message"
LAG_WORKERS: Final = "oldest due delivery"

OUTBOX_LAG: Final = SeriesSpec(
    name="outbox.lag",
    title="Outbox lag",
    unit="s",
    kind=Kind.GAUGE,
    description="Age of the oldest message the relay has not copied yet, and how "
    "long the oldest due delivery has waited for a worker.",
)
OUTBOX_UNRELAYED: Final = SeriesSpec(
    name="outbox.unrelayed",
    title="Messages waiting for the relay",
    unit="messages",
    kind=Kind.GAUGE,
)
DELIVERIES_DUE: Final = SeriesSpec(
    name="deliveries.due",
    title="Due deliveries per subscription",
    unit="deliveries",
    kind=Kind.GAUGE,
    description="Pending deliveries whose time has come: what a drain would claim.",
)
DELIVERIES_DONE: Final = SeriesSpec(
    name="deliveries.done",
    title="Delivery throughput per subscription",
    unit="deliveries",
    kind=Kind.TALLY,
    description="Deliveries done, by the minute their effect committed.",
)
DEAD_LETTERS_NEW: Final = SeriesSpec(
    name="deadletters.new",
    title="Dead letters per hour",
    unit="letters",
    kind=Kind.TALLY,
    per_minutes=60,
    description="Deliveries that used up their attempts, per subscription.",
)
DEAD_LETTERS_OPEN: Final = SeriesSpec(
    name="deadletters.open",
    title="Open dead letters",
    unit="letters",
    kind=Kind.GAUGE,
    description="Letters waiting for an operator (neither redriven nor discarded).",
)


def _subscriptions(counted: dict[tuple[str, int], int]) -> list[str]:
    # Every registered one, so a quiet subscription reads 0, not "unknown".
    names = {name for name, _ in counted}
    return list(SUBSCRIPTIONS) + sorted(names - set(SUBSCRIPTIONS))


def _sample(now: datetime.datetime) -> Iterator[Sample]:
    lag = outbox_lag(now=now)
    yield Sample(OUTBOX_UNRELAYED.name, "all", lag.unrelayed)
    for label, age in (
        (LAG_RELAY, lag.oldest_unrelayed),
        (LAG_WORKERS, lag.oldest_due),
    ):
        yield Sample(OUTBOX_LAG.name, label, age.total_seconds() if age else 0.0)
    for backlog in subscription_backlog(now=now):
        yield Sample(DELIVERIES_DUE.name, backlog.name, backlog.due)
    yield Sample(DEAD_LETTERS_OPEN.name, "all", dead_letter_open_count())

    current = int(now.timestamp() // 60)
    first = current - TALLY_MINUTES + 1
    start = datetime.datetime.fromtimestamp(first * 60, tz=datetime.UTC)
    end = datetime.datetime.fromtimestamp((current + 1) * 60, tz=datetime.UTC)
    for spec, counted in (
        (DELIVERIES_DONE, deliveries_done_per_minute(start=start, end=end)),
        (DEAD_LETTERS_NEW, dead_letters_per_minute(start=start, end=end)),
    ):
        names = _subscriptions(counted)
        for minute in range(first, current + 1):
            for name in names:
                yield Sample(spec.name, name, counted.get((name, minute), 0), minute)


def _families() -> Iterator[Metric]:
    now = datetime.datetime.now(datetime.UTC)
    lag = outbox_lag(now=now)
    yield GaugeMetricFamily(
        f"{PREFIX}outbox_unrelayed_messages",
        "Outbox messages the relay has not copied into deliveries yet",
        value=lag.unrelayed,
    )
    yield GaugeMetricFamily(
        f"{PREFIX}outbox_oldest_unrelayed_age_seconds",
        "Age of the oldest unrelayed outbox message (0 when none)",
        value=lag.oldest_unrelayed.total_seconds() if lag.oldest_unrelayed else 0.0,
    )
    yield GaugeMetricFamily(
        f"{PREFIX}outbox_oldest_due_age_seconds",
        "How long the oldest due delivery has waited for a worker (0 when none)",
        value=lag.oldest_due.total_seconds() if lag.oldest_due else 0.0,
    )
    # Pending and dead only: each count reads a partial index (delivery_pending_due,
    # delivery_dead), so a scrape costs the backlog, not the log. Counting "done"
    # the same way is a pass over nearly every row (660 ms for a million on
    # PostgreSQL); the sampler's recount of recent minutes stands in for it.
    deliveries = GaugeMetricFamily(
        f"{PREFIX}deliveries",
        "Deliveries waiting (pending) or given up on (dead), by subscription",
        labels=["subscription", "status"],
    )
    counted: dict[tuple[str, str], int] = {}
    for status in (Delivery.Status.PENDING, Delivery.Status.DEAD):
        rows = (
            Delivery.objects.filter(status=status)
            .order_by()
            .values("subscription")
            .annotate(count=Count("id"))
        )
        for row in rows:
            counted[(row["subscription"], str(status))] = row["count"]
    names = {name for name, _ in counted}
    for name in [*SUBSCRIPTIONS, *sorted(names - set(SUBSCRIPTIONS))]:
        for status in (Delivery.Status.PENDING, Delivery.Status.DEAD):
            deliveries.add_metric([name, str(status)], counted.get((name, status), 0))
    yield deliveries
    done = GaugeMetricFamily(
        f"{PREFIX}deliveries_done_last_{DONE_WINDOW_MINUTES}m",
        f"Deliveries done over the last {DONE_WINDOW_MINUTES} minutes (the current "
        "one included), by subscription, as the history sampler last counted them",
        labels=["subscription"],
    )
    recent = series_read(
        [DELIVERIES_DONE.name], minutes=DONE_WINDOW_MINUTES, now=now.timestamp()
    )[DELIVERIES_DONE.name]
    for name, values in sorted(recent.values.items()):
        done.add_metric([name], sum(value or 0 for value in values))
    yield done
    letters = GaugeMetricFamily(
        f"{PREFIX}dead_letters_open",
        "Dead letters waiting for an operator, by subscription",
        labels=["subscription"],
    )
    open_rows = (
        DeadLetter.objects.filter(redriven_at__isnull=True, discarded_at__isnull=True)
        .order_by()
        .values("subscription")
        .annotate(count=Count("id"))
        .order_by("subscription")
    )
    counts = {row["subscription"]: row["count"] for row in open_rows}
    for name in [*SUBSCRIPTIONS, *sorted(set(counts) - set(SUBSCRIPTIONS))]:
        letters.add_metric([name], counts.get(name, 0))
    yield letters


def telemetry_register() -> None:
    """Declare the spine's series, sampler and Prometheus families."""
    series_define(
        OUTBOX_LAG,
        OUTBOX_UNRELAYED,
        DELIVERIES_DUE,
        DELIVERIES_DONE,
        DEAD_LETTERS_NEW,
        DEAD_LETTERS_OPEN,
    )
    sampler_register("messaging", _sample)
    exposition_register("messaging", _families)
