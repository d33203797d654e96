"""Read-only queries about the messaging spine, for the operator's admin.

Every function that measures an age takes ``now`` so a page computes all its ages
against one instant and tests can pin it. The ``*_rows`` functions annotate an
admin's queryset, so its numbers are computed in the page's one query and its
columns can be sorted by them.

Sub-modules: ``overview`` (the index's counts, lag and dead-letter clusters),
``dead_letters`` (the worker deaths behind a letter) and, for
the depth pages, ``subscriptions``, ``partitions`` and ``streams``, with ``offsets``
shared by them. Every name is re-exported here.
"""

from __future__ import annotations

from messaging.selectors.dead_letters import dead_letter_rows, worker_deaths
from messaging.selectors.offsets import newest_offset
from messaging.selectors.overview import (
    DeadLetterCluster,
    MessagingOverview,
    OutboxLag,
    SubscriptionCounts,
    dead_letter_clusters,
    dead_letter_open_count,
    messaging_overview,
    outbox_lag,
    subscription_counts,
)
from messaging.selectors.partitions import (
    PartitionLoads,
    partition_lease_rows,
    partitioned_loads,
)
from messaging.selectors.streams import (
    StreamOverview,
    stream_consumer_rows,
    stream_overview,
)
from messaging.selectors.subscriptions import (
    SubscriptionDepth,
    subscription_depth_rows,
    subscription_depths,
)

__all__ = [
    "DeadLetterCluster",
    "MessagingOverview",
    "OutboxLag",
    "PartitionLoads",
    "StreamOverview",
    "SubscriptionCounts",
    "SubscriptionDepth",
    "dead_letter_clusters",
    "dead_letter_open_count",
    "dead_letter_rows",
    "messaging_overview",
    "newest_offset",
    "outbox_lag",
    "partition_lease_rows",
    "partitioned_loads",
    "stream_consumer_rows",
    "stream_overview",
    "subscription_counts",
    "subscription_depth_rows",
    "subscription_depths",
    "worker_deaths",
]
