"""What the jobs app reports: rq queues and shed HTTP requests.

Registered from ``JobsConfig.ready``: the series of the history page, the sampler of
the rq queues, and the Prometheus families of both.

Shed requests are counted where they happen, in each daphne's admission control
(``jobs.shedding``), which knows nothing of Redis: it is handed a
``SeriesShedRecorder`` by the ASGI composition root, buffers each shed in memory on
its event loop and has the flush run in a thread (see ``AdmissionControl``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import django_rq
from django.conf import settings
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from jobs.exposition import PREFIX, exposition_register
from jobs.series import (
    Kind,
    Sample,
    SeriesSpec,
    sampler_register,
    series_add,
    series_define,
    series_flush,
    series_totals,
)

__all__ = [
    "RQ_DEPTH",
    "RQ_OLDEST_AGE",
    "SHED",
    "QueueLevel",
    "SeriesShedRecorder",
    "queue_levels",
    "telemetry_register",
]

RQ_DEPTH: Final = SeriesSpec(
    name="rq.depth",
    title="Queue depth per rq queue",
    unit="jobs",
    kind=Kind.GAUGE,
    description="Jobs waiting in each queue for a worker (started jobs not counted).",
)
RQ_OLDEST_AGE: Final = SeriesSpec(
    name="rq.oldest_age",
    title="Queue latency: age of the oldest waiting job",
    unit="s",
    kind=Kind.GAUGE,
    description="How long the job at the head of each queue has waited; 0 when the "
    "queue is empty. A job waits at least this long before it starts.",
)
SHED: Final = SeriesSpec(
    name="http.shed",
    title="Shed requests (503 by admission control)",
    unit="requests",
    kind=Kind.COUNT,
    description="Per request class and reason: full (queue full on arrival), "
    "displaced (pushed out by a better class), deadline (waited past its budget).",
)


@dataclass(frozen=True)
class QueueLevel:
    queue: str
    depth: int
    oldest_age_s: float  # 0.0 for an empty queue


def queue_levels(now: datetime.datetime) -> list[QueueLevel]:
    """Return the depth and the head job's age of every queue in ``RQ_QUEUES``."""
    levels = []
    for name in settings.RQ_QUEUES:
        queue = django_rq.get_queue(name)
        depth = queue.count
        age = 0.0
        head = queue.get_job_ids(0, 1)
        job = queue.fetch_job(head[0]) if head else None
        # The head can finish or vanish between the two reads: then it has no age.
        if job is not None and job.enqueued_at is not None:
            age = max((now - job.enqueued_at).total_seconds(), 0.0)
        levels.append(QueueLevel(queue=name, depth=depth, oldest_age_s=age))
    return levels


def _sample(now: datetime.datetime) -> Iterator[Sample]:
    for level in queue_levels(now):
        yield Sample(RQ_DEPTH.name, level.queue, level.depth)
        yield Sample(RQ_OLDEST_AGE.name, level.queue, level.oldest_age_s)


class SeriesShedRecorder:
    """Admission control's sink for shed requests: ``record`` buffers, ``flush``
    writes (blocking; admission control runs it off its event loop)."""

    def record(self, priority: str, reason: str) -> None:
        series_add(SHED.name, f"{priority}/{reason}")

    def flush(self) -> None:
        series_flush()


def _families() -> Iterator[Metric]:
    now = datetime.datetime.now(datetime.UTC)
    depth = GaugeMetricFamily(
        f"{PREFIX}rq_queue_depth", "Jobs waiting in an rq queue", labels=["queue"]
    )
    age = GaugeMetricFamily(
        f"{PREFIX}rq_oldest_job_age_seconds",
        "Age of the oldest job waiting in an rq queue (0 when empty)",
        labels=["queue"],
    )
    for level in queue_levels(now):
        depth.add_metric([level.queue], level.depth)
        age.add_metric([level.queue], level.oldest_age_s)
    shed = CounterMetricFamily(
        f"{PREFIX}http_shed",  # the client appends _total
        "HTTP requests shed by admission control, every daphne, since Redis started",
        labels=["class", "reason"],
    )
    for label, count in sorted(series_totals(SHED.name).items()):
        priority, _, reason = label.partition("/")
        shed.add_metric([priority, reason], count)
    yield depth
    yield age
    yield shed


def telemetry_register() -> None:
    """Declare the jobs app's series, sampler and Prometheus families."""
    series_define(RQ_DEPTH, RQ_OLDEST_AGE, SHED)
    sampler_register("rq", _sample)
    exposition_register("rq", _families)
