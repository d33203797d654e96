"""The labs, keyed by lesson slug: a fixed, typed list checked at import.

Adding a lab: write the package ``course/labs/<name>/`` whose ``__init__`` exposes
``LAB = Lab(...)`` and add it to ``_ALL`` below. The check underneath refuses a slug
that is not a lesson of the course.
"""

from __future__ import annotations

from course.labs import (
    backpressure_lab,
    broadcast_channels,
    cache_key_design,
    cache_layers,
    cache_metrics,
    cache_strategies,
    dead_letter_queues,
    delivery_semantics,
    hot_key,
    http_caching,
    invalidation,
    load_shedding_lab,
    long_running_jobs,
    message_queues,
    ordering,
    poison_messages,
    polling_approaches,
    publish_subscribe,
    rationale,
    scheduled_tasks,
    server_sent_events,
    streaming_responses,
    streams_vs_queues,
    websocket_server,
    worker_processes,
)
from course.labs.harness.base import Lab, LabError
from course.lessons import lesson_get

_ALL: tuple[Lab, ...] = (
    cache_layers.LAB,
    cache_strategies.LAB,
    invalidation.LAB,
    cache_key_design.LAB,
    hot_key.LAB,
    http_caching.LAB,
    cache_metrics.LAB,
    rationale.LAB,
    message_queues.LAB,
    publish_subscribe.LAB,
    streams_vs_queues.LAB,
    delivery_semantics.LAB,
    ordering.LAB,
    dead_letter_queues.LAB,
    poison_messages.LAB,
    worker_processes.LAB,
    scheduled_tasks.LAB,
    long_running_jobs.LAB,
    backpressure_lab.LAB,
    load_shedding_lab.LAB,
    polling_approaches.LAB,
    server_sent_events.LAB,
    websocket_server.LAB,
    broadcast_channels.LAB,
    streaming_responses.LAB,
)

LABS: dict[str, Lab] = {lab.slug: lab for lab in _ALL}

for _lab in _ALL:
    if lesson_get(_lab.slug) is None:
        raise RuntimeError(f"lab {_lab.slug!r} does not belong to any lesson")
if len(LABS) != len(_ALL):
    raise RuntimeError("two labs share a slug")


class UnknownLab(LabError):
    pass


def lab_get(slug: str) -> Lab:
    """Return the lab for ``slug``; raise UnknownLab with a one-line reason."""
    try:
        return LABS[slug]
    except KeyError:
        known = ", ".join(sorted(LABS))
        raise UnknownLab(f"no lab named {slug!r} (labs: {known})") from None


def lab_find(slug: str) -> Lab | None:
    return LABS.get(slug)
