"""Stream consumers: how far each is behind the newest offset."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import Case, F, IntegerField, QuerySet, Value, When
from django.db.models.functions import Coalesce

from messaging.models import LogRetention, StreamConsumer
from messaging.registry import STREAM_CONSUMERS
from messaging.selectors.offsets import newest_offset, newest_offset_subquery


def stream_consumer_rows(
    queryset: QuerySet[StreamConsumer],
) -> QuerySet[StreamConsumer]:
    """Annotate stream consumers with ``gap``: newest offset minus their offset.

    The offset is the last message a consumer applied, so ``gap`` is exactly the
    number of offsets it still has to read (0 when caught up).
    """
    return queryset.annotate(
        newest_offset=Coalesce(newest_offset_subquery(), Value(0))
    ).annotate(
        gap=Case(
            When(newest_offset__lt=F("offset"), then=Value(0)),
            default=F("newest_offset") - F("offset"),
            output_field=IntegerField(),
        )
    )


@dataclass(frozen=True)
class StreamOverview:
    newest_offset: int
    earliest_offset: int
    trimmed_total: int
    last_trim_at: datetime.datetime | None
    slowest: str | None  # the registered consumer with the lowest offset
    # slowest offset - (earliest offset - 1): how many kept messages the slowest
    # consumer has already read. 0: the next trim may cut it; below 0: it was cut
    # (its next message is gone). None when no consumer is registered.
    slowest_gap_to_earliest: int | None


def stream_overview() -> StreamOverview:
    """Return the log's retention state and the slowest consumer's distance to it.

    Registered consumers without a row yet count at offset 0, where the stream
    worker would create them.
    """
    retention = LogRetention.objects.filter(pk=1).first() or LogRetention()
    offsets = dict.fromkeys(STREAM_CONSUMERS, 0)
    offsets.update(
        StreamConsumer.objects.filter(name__in=list(offsets)).values_list(
            "name", "offset"
        )
    )
    slowest = min(offsets, key=lambda n: (offsets[n], n)) if offsets else None
    earliest = retention.earliest_offset
    return StreamOverview(
        newest_offset=newest_offset(),
        earliest_offset=earliest,
        trimmed_total=retention.trimmed_total,
        last_trim_at=retention.last_trim_at,
        slowest=slowest,
        slowest_gap_to_earliest=(
            None if slowest is None else offsets[slowest] - (earliest - 1)
        ),
    )
