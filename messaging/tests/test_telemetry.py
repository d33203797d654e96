"""The spine's sampler: lag, due deliveries, throughput and dead letters per minute,
measured from real loans drained by the real relay and workers."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from jobs.series import series_read, series_reset, series_sample
from messaging.models import DeadLetter, Delivery, OutboxMessage
from messaging.registry import SUBSCRIPTIONS
from messaging.telemetry import (
    DEAD_LETTERS_NEW,
    DEAD_LETTERS_OPEN,
    DELIVERIES_DONE,
    DELIVERIES_DUE,
    LAG_RELAY,
    LAG_WORKERS,
    OUTBOX_LAG,
    OUTBOX_UNRELAYED,
)
from messaging.tests.test_selectors import break_subscribers, issue_and_drain

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(redis_client):
    series_reset()
    yield
    series_reset()


def _read(spec, now, minutes=1):
    return series_read([spec.name], minutes=minutes, now=now.timestamp())[spec.name]


def test_throughput_counts_each_subscriptions_deliveries_done(library_rows, history):
    issue_and_drain(1, 2, 3)
    now = timezone.now()

    series_sample(now=now)

    done = _read(DELIVERIES_DONE, now, minutes=2).values
    for name in SUBSCRIPTIONS:
        expected = Delivery.objects.filter(
            subscription=name, status=Delivery.Status.DONE
        ).count()
        assert sum(v or 0 for v in done[name]) == expected
    assert sum(v or 0 for v in done["notification"]) == 3
    # Drained: nothing waits, so the lag is zero rather than unknown.
    assert _read(OUTBOX_UNRELAYED, now).values == {"all": [0.0]}
    assert _read(OUTBOX_LAG, now).values == {LAG_RELAY: [0.0], LAG_WORKERS: [0.0]}
    assert set(_read(DELIVERIES_DUE, now).values) >= set(SUBSCRIPTIONS)


def test_lag_and_due_deliveries_before_the_drain(library_rows, history):
    message = OutboxMessage.objects.create(type="loan_issued", key="1", body={})
    created = timezone.now() - datetime.timedelta(seconds=90)
    OutboxMessage.objects.filter(pk=message.pk).update(created_at=created)
    Delivery.objects.create(
        message=message,
        subscription="notification",
        available_at=timezone.now() - datetime.timedelta(seconds=30),
    )
    now = timezone.now()

    series_sample(now=now)

    assert _read(OUTBOX_UNRELAYED, now).values == {"all": [1.0]}
    lag = _read(OUTBOX_LAG, now).values
    assert lag[LAG_RELAY][0] == pytest.approx(90, abs=2)
    assert lag[LAG_WORKERS][0] == pytest.approx(30, abs=2)
    assert _read(DELIVERIES_DUE, now).values["notification"] == [1.0]


def test_a_delivery_committed_late_is_counted_in_its_own_minute(library_rows, history):
    message = OutboxMessage.objects.create(type="loan_issued", key="1", body={})
    now = timezone.now()
    series_sample(now=now)
    # Done two minutes ago, committed only now (after the last sample).
    Delivery.objects.create(
        message=message,
        subscription="notification",
        status=Delivery.Status.DONE,
        available_at=now,
        done_at=now - datetime.timedelta(minutes=2),
    )

    series_sample(now=now)
    series_sample(now=now)  # recounting again changes nothing

    done = _read(DELIVERIES_DONE, now, minutes=3).values["notification"]
    assert done == [1.0, 0.0, 0.0]


def test_dead_letters_are_counted_per_subscription(library_rows, history, monkeypatch):
    break_subscribers(monkeypatch)
    issue_and_drain(1, 2)
    now = timezone.now()
    assert DeadLetter.objects.count() > 0

    series_sample(now=now)

    new = _read(DEAD_LETTERS_NEW, now, minutes=2).values
    assert sum(v or 0 for v in new["notification"]) == 2
    assert sum(v or 0 for v in new["broadcast"]) == 2
    assert _read(DEAD_LETTERS_OPEN, now).values == {
        "all": [float(DeadLetter.objects.count())]
    }
