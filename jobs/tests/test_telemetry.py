"""The rq sampler on real queues, and shed requests recorded from load shedding."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from typing import Any

import django_rq
import pytest
from rq import Queue

from jobs.series import series_read, series_reset, series_sample, series_totals
from jobs.shedding import SHED_FLUSH_S, AdmissionControl
from jobs.shedding_policy import Limits
from jobs.telemetry import RQ_DEPTH, RQ_OLDEST_AGE, SHED, SeriesShedRecorder

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(redis_client, settings) -> Queue:
    # A queue of this test alone, so no worker of another test takes its jobs. rq's
    # own Queue class: django-rq's would hold the enqueue until the test commits.
    name = f"series-test-{uuid.uuid4().hex[:8]}"
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, name: settings.RQ_QUEUES["default"]}
    series_reset()
    return Queue(name, connection=django_rq.get_connection(name))


def test_sample_records_depth_and_the_head_jobs_age(queue):
    first = queue.enqueue("os.getcwd")
    queue.enqueue("os.getcwd")
    queue.enqueue("os.getcwd")
    assert first.enqueued_at is not None
    now = first.enqueued_at + datetime.timedelta(seconds=42)

    run = series_sample(now=now)

    assert not run.failed
    found = series_read(
        [RQ_DEPTH.name, RQ_OLDEST_AGE.name], minutes=1, now=now.timestamp()
    )
    assert found[RQ_DEPTH.name].values[queue.name] == [3.0]
    # The head of the list is the oldest job: the one enqueued first.
    assert found[RQ_OLDEST_AGE.name].values[queue.name] == [pytest.approx(42.0)]
    # Every configured queue is sampled, an empty one with depth 0 and age 0.
    assert found[RQ_DEPTH.name].values["labs"] is not None


def test_an_emptied_queue_reads_zero_depth_and_zero_age(queue):
    queue.enqueue("os.getcwd")
    queue.empty()
    now = datetime.datetime.now(datetime.UTC)

    series_sample(now=now)

    found = series_read(
        [RQ_DEPTH.name, RQ_OLDEST_AGE.name], minutes=1, now=now.timestamp()
    )
    assert found[RQ_DEPTH.name].values[queue.name] == [0.0]
    assert found[RQ_OLDEST_AGE.name].values[queue.name] == [0.0]


async def _app(scope, receive, send):
    await asyncio.Event().wait()  # holds its place until cancelled


async def test_shed_requests_reach_redis_off_the_event_loop(redis_client):
    series_reset()
    admission = AdmissionControl(
        _app,
        limits=Limits(max_running=1, max_queued=0, reserved=0),
        shed_recorder=SeriesShedRecorder(),
    )
    sent: list[dict[str, Any]] = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request"}

    scope = {"type": "http", "path": "/branches/1/"}
    holder = asyncio.create_task(admission(scope, receive, send))
    await asyncio.sleep(0)  # the first request takes the only place
    await admission(scope, receive, send)  # the second is shed: queue size 0
    await admission({**scope, "path": "/reports/x/"}, receive, send)

    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [
        503,
        503,
    ]
    # Nothing was written on the loop: the flush waits for its interval, then runs
    # in the executor (this test's own reads go to Redis directly, not flushing).
    totals_key = f"series:{SHED.name}:total"
    assert redis_client.hgetall(totals_key) == {}
    deadline = time.monotonic() + SHED_FLUSH_S + 10
    while not redis_client.hgetall(totals_key) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    holder.cancel()

    assert series_totals(SHED.name) == {"normal/full": 1, "low/full": 1}
    history = series_read([SHED.name], minutes=1)[SHED.name]
    assert history.values == {"low/full": [1.0], "normal/full": [1.0]}
