"""The rq sampler on real queues, and shed requests recorded from load shedding."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django_rq
import pytest
from rq import Queue

from config.processes import wait_until
from jobs.series import series_read, series_reset, series_sample, series_totals
from jobs.shedding import SHED_FLUSH_S, AdmissionControl
from jobs.shedding_policy import Limits
from jobs.telemetry import RQ_DEPTH, RQ_OLDEST_AGE, SHED, SeriesShedRecorder
from jobs.tests.manual_loop import manual_loop, run_manual, settle

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
    assert found[RQ_DEPTH.name].values["messaging"] is not None


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


class CountingExecutor(ThreadPoolExecutor):
    """A loop's default executor that counts, on the loop, the calls handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_shed_requests_reach_redis_off_the_event_loop(redis_client):
    series_reset()
    totals_key = f"series:{SHED.name}:total"

    async def scenario() -> None:
        # The flush interval is timed by the loop's clock, which only this test
        # moves: the flush is checked just before and at SHED_FLUSH_S.
        loop = manual_loop()
        executor = CountingExecutor()
        loop.set_default_executor(executor)
        admission = AdmissionControl(
            _app,
            limits=Limits(max_running=1, max_queued=0, reserved=0),
            clock=loop.time,
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
        # Nothing was written on the loop: the flush waits for its interval, then
        # runs in the executor (this test's own reads go to Redis directly).
        assert redis_client.hgetall(totals_key) == {}
        loop.advance(SHED_FLUSH_S - 2**-10)  # a millisecond before the interval
        await settle()
        assert executor.submitted == 0  # no flush handed to the executor yet
        assert redis_client.hgetall(totals_key) == {}
        loop.advance(2**-10)  # the interval is over: the flush starts
        await settle()
        assert executor.submitted == 1  # one flush for both sheds
        await asyncio.to_thread(
            wait_until, lambda: redis_client.hgetall(totals_key), "the flush"
        )
        holder.cancel()

    run_manual(scenario)

    assert series_totals(SHED.name) == {"normal/full": 1, "low/full": 1}
    history = series_read([SHED.name], minutes=1)[SHED.name]
    assert history.values == {"low/full": [1.0], "normal/full": [1.0]}
