"""The outbox log read as a stream: named consumers with offsets, replay, retention.

The same log feeds two models side by side. The subscriptions copy each message
once per subscriber (``Delivery`` rows, queue semantics). A stream consumer copies
nothing: it keeps one number, the offset of the last message it applied, and moves
it in the same transaction as the effect, so a crash repeats no effect and skips no
message. Replaying is moving that number back (``stream_rewind``).

Retention (``log_trim``) deletes the oldest messages once they are older than
``MESSAGING_RETENTION_DAYS`` or beyond the newest ``MESSAGING_RETENTION_MESSAGES``,
always as a prefix, and never past a message some subscription has not finished
(pending, or dead and waiting for a redrive). ``LogRetention.earliest_offset`` is
where the log now starts. A consumer whose next message is gone is not moved
silently past the hole: it turns ``trimmed``, stops, and says so in the admin and
the log, until an operator rewinds it to what is kept.

On PostgreSQL, ids are drawn when a transaction inserts, not when it commits, so a
slow transaction can commit id 10 after id 11 is visible. A consumer that read 11
and moved on would never see 10. Consumers therefore read only messages older than
``STREAM_GRACE`` (longer than any of the services' short transactions). SQLite
commits one writer at a time, so ids become visible in order and no grace is needed.
"""

from __future__ import annotations

import datetime
import logging
import traceback
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from messaging import dispatch
from messaging.errors import PermanentMessageError
from messaging.models import Delivery, LogRetention, OutboxMessage, StreamConsumer
from messaging.registry import (
    STREAM_CONSUMERS,
    STREAM_HANDLERS,
    STREAM_RESETS,
    stream_batch_handler_for,
)

log = logging.getLogger("messaging")

STREAM_GRACE = datetime.timedelta(seconds=1)
# A failing consumer is tried again after this long, not in a tight loop.
FAILING_PAUSE = datetime.timedelta(seconds=2)
TRIM_CHUNK = 1000


class RewindError(ValueError):
    """A rewind that cannot be done (unknown consumer, trimmed or future offset)."""


def earliest_offset() -> int:
    """Return the smallest offset the log may still hold (1 until a trim)."""
    row = LogRetention.objects.filter(pk=1).values_list("earliest_offset", flat=True)
    return row.first() or 1


def _visible_upto() -> int | None:
    """Return the highest offset safe to read, or None when every offset is."""
    if connection.vendor == "sqlite":
        return None
    cutoff = timezone.now() - STREAM_GRACE
    newest: int | None = OutboxMessage.objects.filter(created_at__lte=cutoff).aggregate(
        n=Max("id")
    )["n"]
    return newest or 0


def _consumer_locked(name: str) -> StreamConsumer | None:
    """Return the consumer's row locked for this transaction, or None if busy."""
    rows = StreamConsumer.objects.filter(name=name)
    if connection.vendor == "postgresql":
        rows = rows.select_for_update(skip_locked=True)
    return rows.first()


def stream_advance(name: str) -> int:
    """Apply the consumer's next batch; return how many messages it moved past.

    Its handler runs for the accepted types only, but the offset moves past every
    message read: the consumer's position is in the log, not in its own types.
    """
    if name not in STREAM_CONSUMERS:
        raise KeyError(f"no stream consumer named {name!r}")
    try:
        try:
            return _advance_creating(name)
        except _Unusable as bad:
            # The batch rolled back. Apply what came before the bad message and step
            # past it: a malformed body will never apply, and a stream that stopped
            # on it would stop for good.
            log.warning(
                "stream consumer %s skips message %s: %s", name, bad.message_id, bad
            )
            return _advance(name, skip=bad.message_id, reason=str(bad))
    except Exception as error:
        text = traceback.format_exception_only(type(error), error)[-1].strip()
        StreamConsumer.objects.filter(name=name).update(
            state=StreamConsumer.State.FAILING,
            last_error=text[:2000],
            updated_at=timezone.now(),
        )
        log.warning("stream consumer %s failed, will retry: %s", name, text)
        return 0


def _advance_creating(name: str) -> int:
    """``_advance``, creating the consumer's row first if it has none."""
    try:
        return _advance(name)
    except _NoRow:
        # Created outside the batch's transaction, so a failure can still be
        # recorded on it; looked for only when missing, not on every pass.
        StreamConsumer.objects.get_or_create(name=name)
        return _advance(name)


class _NoRow(Exception):
    """The consumer has no row yet."""


class _Unusable(Exception):
    def __init__(self, message_id: int, error: Exception) -> None:
        super().__init__(str(error))
        self.message_id = message_id


def _advance(name: str, *, skip: int | None = None, reason: str = "") -> int:
    """Apply one batch in one transaction with the offset; with ``skip``, the batch
    ends at that message, which is stepped over."""
    spec = STREAM_CONSUMERS[name]
    with transaction.atomic():
        consumer = _consumer_locked(name)
        if consumer is None and not StreamConsumer.objects.filter(name=name).exists():
            raise _NoRow
        if consumer is None or consumer.state == StreamConsumer.State.TRIMMED:
            return 0
        if consumer.offset + 1 < earliest_offset():
            _mark_trimmed(consumer)
            return 0
        upto = _visible_upto()
        unread = OutboxMessage.objects.filter(id__gt=consumer.offset)
        if upto is not None:
            unread = unread.filter(id__lte=upto)
        if skip is not None:
            unread = unread.filter(id__lte=skip)
        messages = list(unread.order_by("id")[: spec.batch])
        if not messages:
            return 0
        accepted = [m for m in messages if m.pk != skip and m.type in spec.accepts]
        if not _apply_batch(name, accepted):
            handler = STREAM_HANDLERS[name]
            for message in accepted:
                try:
                    handler(message)
                except PermanentMessageError as error:
                    raise _Unusable(message.pk, error) from error
        consumer.offset = messages[-1].pk
        consumer.applied_total += len(messages)
        consumer.state = StreamConsumer.State.OK
        if skip is not None:
            # Kept until another error replaces it: the state says whether it is
            # current, the text what last went wrong.
            note = f"stepped past message {skip}, which cannot be applied: {reason}"
            consumer.last_error = note[:2000]
        consumer.save()
        return len(messages)


def _apply_batch(name: str, accepted: list[OutboxMessage]) -> bool:
    """Apply ``accepted`` with the consumer's batch handler; False if it has none or
    a message cannot be applied (the caller then goes one by one, which finds it).

    Call inside the batch's transaction: the savepoint undoes a half-applied batch.
    """
    apply = stream_batch_handler_for(name)
    if apply is None or len(accepted) < 2:
        return False
    try:
        with transaction.atomic():
            apply(accepted)
    except PermanentMessageError:
        return False
    return True


def _mark_trimmed(consumer: StreamConsumer) -> None:
    earliest = earliest_offset()
    consumer.state = StreamConsumer.State.TRIMMED
    consumer.last_error = (
        f"its next offset {consumer.offset + 1} was trimmed; the log now starts at "
        f"{earliest}. Rewind it to a kept offset (and rebuild) to go on."
    )
    consumer.save(update_fields=["state", "last_error", "updated_at"])
    log.error("stream consumer %s: %s", consumer.name, consumer.last_error)


def streams_advance() -> int:
    """Move every stream consumer on by one batch; return the messages moved past."""
    return sum(stream_advance(name) for name in STREAM_CONSUMERS)


def streams_behind() -> bool:
    """Return whether a consumer that can move has unread messages."""
    newest = OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0
    known = {c.name: c for c in StreamConsumer.objects.all()}
    pause_start = timezone.now() - FAILING_PAUSE
    for name in STREAM_CONSUMERS:
        consumer = known.get(name)
        if consumer is None:
            if newest:
                return True
            continue
        if consumer.state == StreamConsumer.State.TRIMMED:
            continue
        failing = consumer.state == StreamConsumer.State.FAILING
        if failing and consumer.updated_at > pause_start:
            continue
        if consumer.offset < newest:
            return True
    return False


# --- replay ------------------------------------------------------------------------


def offset_before(moment: datetime.datetime) -> int:
    """Return the offset to rewind to so that replay starts at ``moment``."""
    first_after = (
        OutboxMessage.objects.filter(created_at__gte=moment)
        .order_by("id")
        .values_list("id", flat=True)
        .first()
    )
    if first_after is None:
        return OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0
    return first_after - 1


def stream_rewind(
    name: str,
    *,
    offset: int,
    rebuild: bool,
    user: AbstractBaseUser | None = None,
) -> StreamConsumer:
    """Move a consumer back (or forward) to ``offset``; it replays from there.

    With ``rebuild`` the projection is emptied first, in the same transaction, so the
    replay rebuilds it from the log: only from the start of what the log keeps (a
    rebuild from a later offset is refused); rewinding to the start with a rebuild
    must end equal to the live projection. After a trim, the rebuilt projection
    holds only what the kept messages build. An offset whose next message was trimmed is
    refused: the replay would silently miss what was dropped. So is an offset past
    the newest message: the consumer would take every message published up to it as
    already applied and skip them all.
    """
    if name not in STREAM_CONSUMERS:
        raise RewindError(f"no stream consumer named {name!r}")
    earliest = earliest_offset()
    if offset < 0 or offset + 1 < earliest:
        raise RewindError(
            f"offset {offset} is not kept: the log starts at {earliest}, so the "
            f"lowest offset to rewind to is {earliest - 1}"
        )
    if rebuild and offset != earliest - 1:
        # The rebuild empties the whole projection: replaying only from the middle
        # of the log would drop what the skipped messages had built.
        raise RewindError(
            f"a rebuild replays the whole kept log: rewind to {earliest - 1}, not "
            f"{offset} (or rewind without rebuilding)"
        )
    # Read before the transaction: the log only grows, so an offset at or below
    # this head stays inside it. A log trimmed to nothing keeps its head just
    # before its earliest offset.
    newest = max(OutboxMessage.objects.aggregate(n=Max("id"))["n"] or 0, earliest - 1)
    if offset > newest:
        raise RewindError(
            f"offset {offset} is past the end of the log: the newest offset is "
            f"{newest}, so the highest offset to rewind to is {newest}"
        )
    with transaction.atomic():
        StreamConsumer.objects.get_or_create(name=name)
        consumer = StreamConsumer.objects.select_for_update().get(name=name)
        if rebuild:
            STREAM_RESETS[name]()
        consumer.offset = offset
        consumer.state = StreamConsumer.State.OK
        consumer.last_error = ""
        consumer.rewound_at = timezone.now()
        consumer.rewound_by = user  # type: ignore[assignment]
        consumer.rewound_to = offset
        consumer.save()
        transaction.on_commit(dispatch.nudge_drain)
    log.info("stream consumer %s rewound to %s (rebuild=%s)", name, offset, rebuild)
    return consumer


# --- retention ---------------------------------------------------------------------


@dataclass(frozen=True)
class TrimReport:
    trimmed: int
    earliest_offset: int
    # The first message the trim had to keep although retention allowed dropping it.
    held_by: int | None
    consumers_cut: list[str]


def _retention_cutoff(now: datetime.datetime, max_age: datetime.timedelta) -> int:
    """Return the highest offset retention allows to drop (0: none)."""
    by_age = (
        OutboxMessage.objects.filter(created_at__lt=now - max_age).aggregate(
            n=Max("id")
        )["n"]
        or 0
    )
    keep = settings.MESSAGING_RETENTION_MESSAGES
    total = OutboxMessage.objects.count()
    by_size = 0
    if total > keep:
        by_size = (
            OutboxMessage.objects.order_by("id")
            .values_list("id", flat=True)[total - keep - 1 : total - keep]
            .first()
            or 0
        )
    return max(by_age, by_size)


def _first_unfinished(upto: int) -> int | None:
    """Return the oldest message at or below ``upto`` that must stay, if any."""
    unrelayed = (
        OutboxMessage.objects.filter(id__lte=upto, relayed_at__isnull=True)
        .order_by("id")
        .values_list("id", flat=True)
        .first()
    )
    unfinished = (
        Delivery.objects.filter(message_id__lte=upto)
        .exclude(status=Delivery.Status.DONE)
        .order_by("message_id")
        .values_list("message_id", flat=True)
        .first()
    )
    held = [x for x in (unrelayed, unfinished) if x is not None]
    return min(held) if held else None


def log_trim(now: datetime.datetime | None = None) -> TrimReport:
    """Drop the log's expired prefix; mark consumers whose next message went."""
    now = now or timezone.now()
    max_age = datetime.timedelta(days=settings.MESSAGING_RETENTION_DAYS)
    cutoff = _retention_cutoff(now, max_age)
    held_by = _first_unfinished(cutoff) if cutoff else None
    if held_by is not None:
        cutoff = held_by - 1
    trimmed = 0
    while cutoff > 0:
        with transaction.atomic():
            ids = list(
                OutboxMessage.objects.filter(id__lte=cutoff)
                .order_by("id")
                .values_list("id", flat=True)[:TRIM_CHUNK]
            )
            if not ids:
                break
            OutboxMessage.objects.filter(id__in=ids).delete()
            trimmed += len(ids)
    with transaction.atomic():
        retention, _ = LogRetention.objects.select_for_update().get_or_create(pk=1)
        if cutoff + 1 > retention.earliest_offset:
            retention.earliest_offset = cutoff + 1
        retention.trimmed_total += trimmed
        retention.last_trim_at = now
        retention.save()
        earliest = retention.earliest_offset
    cut = list(
        StreamConsumer.objects.filter(offset__lt=earliest - 1)
        .exclude(state=StreamConsumer.State.TRIMMED)
        .values_list("name", flat=True)
    )
    for consumer in StreamConsumer.objects.filter(name__in=cut):
        _mark_trimmed(consumer)
    if trimmed:
        log.info("log trimmed: %s messages, now starts at %s", trimmed, earliest)
    return TrimReport(trimmed, earliest, held_by, cut)
