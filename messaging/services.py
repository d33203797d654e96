"""The messaging spine: publish into the outbox, relay into deliveries, claim, process.

Guarantees, and where each comes from:
- A message exists iff the change it describes committed (``outbox_publish`` runs in
  the caller's transaction).
- Every accepting subscription gets exactly one delivery (unique constraint; a second
  relay of the same message inserts nothing).
- Every effect happens at most once per subscription and message (the guard row
  commits with the effect), and at least once while attempts remain (leases expire,
  the sweep re-nudges): together, exactly once.
"""

from __future__ import annotations

import datetime
import logging
import random
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max, Q
from django.utils import timezone
from django.utils.module_loading import import_string

from messaging.models import (
    DeadLetter,
    Delivery,
    OutboxMessage,
    ProcessedMessage,
    SubscriptionState,
)
from messaging.policies import partition_of
from messaging.registry import (
    SUBSCRIPTIONS,
    MessageType,
    Subscription,
    subscriptions_for,
)

log = logging.getLogger("messaging")

Handler = Callable[[OutboxMessage], None]
_random = random.SystemRandom()


def outbox_publish(
    *, type: MessageType, key: str | int, body: dict[str, Any]
) -> OutboxMessage:
    """Append a message to the outbox. Call inside the transaction of the change.

    The relay is nudged after commit; a rollback takes the message with it.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("outbox_publish must run inside the change's transaction")
    message = OutboxMessage.objects.create(type=type.value, key=str(key), body=body)
    # Imported here: tasks import this module.
    from messaging.tasks import nudge_drain

    transaction.on_commit(nudge_drain)
    return message


# --- Relay --------------------------------------------------------------------


def relay_pending(*, limit: int = 500) -> int:
    """Write the deliveries of messages not relayed yet; return how many messages.

    A subscription gets a copy when its filter accepts the type, it is active and
    the message came after it started (``SubscriptionState``): a filtered-out or
    too-early message is never copied. Safe to run concurrently: the unique
    constraint makes a second copy a no-op.
    """
    # Look before taking the write transaction: on SQLite (IMMEDIATE) an empty relay
    # would still take the database's write lock from the requests issuing loans.
    if not OutboxMessage.objects.filter(relayed_at__isnull=True).exists():
        return 0
    with transaction.atomic():
        messages = list(
            OutboxMessage.objects.filter(relayed_at__isnull=True).order_by("id")[:limit]
        )
        if not messages:
            return 0
        states = subscription_states()
        now = timezone.now()
        deliveries = [
            Delivery(
                message=m,
                subscription=s.name,
                available_at=now,
                partition=partition_of(m.key, s.partitions) if s.partitions else None,
            )
            for m in messages
            for s in subscriptions_for(m.type)
            if states[s.name].takes(m.pk)
        ]
        Delivery.objects.bulk_create(deliveries, ignore_conflicts=True, batch_size=500)
        OutboxMessage.objects.filter(pk__in=[m.pk for m in messages]).update(
            relayed_at=now
        )
    return len(messages)


@dataclass(frozen=True)
class _State:
    active: bool
    starts_after: int

    def takes(self, message_id: int) -> bool:
        return self.active and message_id > self.starts_after


def subscription_states() -> dict[str, _State]:
    """Return each subscription's state, starting the ones seen for the first time.

    A new subscription starts after the last message relayed so far: it sees what
    is published from now on, not the history. Call inside the relay's transaction.
    """
    rows = {
        row.name: _State(row.active, row.starts_after)
        for row in SubscriptionState.objects.all()
    }
    missing = [s for s in SUBSCRIPTIONS.values() if s.name not in rows]
    if missing:
        last = (
            OutboxMessage.objects.filter(relayed_at__isnull=False).aggregate(
                last=Max("id")
            )["last"]
            or 0
        )
        created = [
            SubscriptionState(name=s.name, active=s.starts_active, starts_after=last)
            for s in missing
        ]
        SubscriptionState.objects.bulk_create(created, ignore_conflicts=True)
        for state in SubscriptionState.objects.filter(
            name__in=[s.name for s in missing]
        ):
            rows[state.name] = _State(state.active, state.starts_after)
    return rows


def subscription_start(name: str, *, active: bool = True) -> SubscriptionState:
    """Start (or pause) a subscription: from now on it gets copies of new messages.

    Starting again moves its start to the newest message: what was published while
    it was paused is never copied to it.
    """
    if name not in SUBSCRIPTIONS:
        raise KeyError(f"no subscription named {name!r}")
    with transaction.atomic():
        newest = OutboxMessage.objects.aggregate(last=Max("id"))["last"] or 0
        state, _ = SubscriptionState.objects.update_or_create(
            name=name,
            defaults={"active": active, **({"starts_after": newest} if active else {})},
        )
    return state


# --- Claim --------------------------------------------------------------------


def _due(now: datetime.datetime) -> Q:
    return Q(status=Delivery.Status.PENDING, available_at__lte=now) & (
        Q(leased_until__isnull=True) | Q(leased_until__lt=now)
    )


def lane_subscriptions(lane: str) -> list[str]:
    """Return the names of the subscriptions drained in ``lane``."""
    return [s.name for s in SUBSCRIPTIONS.values() if s.lane == lane]


def deliveries_claim(
    *,
    owner: str,
    limit: int,
    now: datetime.datetime | None = None,
    lane: str = "main",
) -> list[Delivery]:
    """Lease up to ``limit`` due deliveries to ``owner``; count the attempt now.

    Counting at claim time is what isolates a message that kills its worker: the
    count grows even though the worker never gets to record a failure.

    A batch is up to ``limit`` fresh deliveries plus at most one that was tried
    before, placed last: a retried delivery may be the one that killed a worker, so
    it is processed after its batch-mates, which then lose nothing if it kills this
    worker too. Taking one in every batch keeps retries from starving behind a
    steady stream of fresh work.
    """
    now = now or timezone.now()
    # Partitioned deliveries are taken a partition at a time (messaging.partitions).
    due = Delivery.objects.filter(
        _due(now), partition__isnull=True, subscription__in=lane_subscriptions(lane)
    )
    if connection.vendor == "postgresql":
        return _claim_skip_locked(due, owner=owner, now=now, limit=limit)
    return _claim_compare_and_set(due, owner=owner, now=now, limit=limit)


def _lease(subscription_name: str) -> datetime.timedelta:
    own = SUBSCRIPTIONS[subscription_name].visibility
    return (
        own
        if own is not None
        else datetime.timedelta(seconds=settings.MESSAGING_LEASE_SECONDS)
    )


def _batch_order(due: Any) -> Any:
    return due.order_by("available_at", "id")


def _claim_skip_locked(
    due: Any, *, owner: str, now: datetime.datetime, limit: int
) -> list[Delivery]:
    with transaction.atomic():
        locked = due.select_related("message").select_for_update(
            skip_locked=True, of=("self",)
        )
        rows = list(_batch_order(locked.filter(attempts=0))[:limit])
        rows += list(_batch_order(locked.filter(attempts__gt=0))[:1])
        for row in rows:
            row.leased_until = now + _lease(row.subscription)
            row.attempts += 1
            row.lease_owner = owner
        Delivery.objects.bulk_update(rows, ["leased_until", "attempts", "lease_owner"])
    return rows


def _claim_compare_and_set(
    due: Any, *, owner: str, now: datetime.datetime, limit: int
) -> list[Delivery]:
    """Claim with one conditional UPDATE per lease length, checked by its row count.

    SQLite has no row locks. The candidates are read and claimed inside one write
    transaction (IMMEDIATE, see settings), and the UPDATE repeats the due condition
    and each row's attempt count: it only moves rows nobody claimed since they were
    read, and its row count says whether all of them moved. If one did not (a claim
    raced in, say under a deferred transaction mode), the batch is rolled back and
    claimed row by row, each row's count deciding who won it.
    """
    try:
        with transaction.atomic():
            candidates = _claim_candidates(due, limit)
            if not _claim_all(due, candidates, owner=owner, now=now):
                raise _ClaimRaced
    except _ClaimRaced:
        with transaction.atomic():
            candidates = [
                c
                for c in _claim_candidates(due, limit)
                if _claim_all(due, [c], owner=owner, now=now)
            ]
    return list(
        Delivery.objects.filter(pk__in=[pk for pk, *_ in candidates])
        .select_related("message")
        .order_by("id")
    )


class _ClaimRaced(Exception):
    pass


def _claim_candidates(due: Any, limit: int) -> list[tuple[int, int, str]]:
    columns = ("id", "attempts", "subscription")
    fresh = list(_batch_order(due.filter(attempts=0)).values_list(*columns)[:limit])
    retried = list(_batch_order(due.filter(attempts__gt=0)).values_list(*columns)[:1])
    return fresh + retried


def _claim_all(
    due: Any,
    candidates: list[tuple[int, int, str]],
    *,
    owner: str,
    now: datetime.datetime,
) -> bool:
    """Claim every candidate or report that some moved.

    One UPDATE per (lease, attempt count) group: a fresh batch is a single statement.
    """
    groups: dict[tuple[datetime.timedelta, int], list[int]] = {}
    for pk, attempts, subscription in candidates:
        groups.setdefault((_lease(subscription), attempts), []).append(pk)
    for (lease, attempts), pks in groups.items():
        moved = due.filter(pk__in=pks, attempts=attempts).update(
            attempts=attempts + 1, lease_owner=owner, leased_until=now + lease
        )
        if moved != len(pks):
            return False
    return True


# --- Process ------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    delivery_id: int
    result: str  # "done", "duplicate", "retry", "dead", "lost_lease"


def deliveries_process(deliveries: list[Delivery], *, owner: str) -> list[Outcome]:
    """Process a claimed batch, each delivery in a transaction of its own.

    One transaction per delivery, not per batch: a worker killed mid-batch then
    loses only the delivery in hand, and the finished ones stay done. (A batch-wide
    transaction was measured faster but made every crash cost the whole batch an
    attempt, which pushed innocent batch-mates toward the dead letters.) Deliveries
    tried before come last: one of them may be what kills workers.
    """
    ordered = sorted(deliveries, key=lambda d: d.attempts > 1)
    try:
        return [delivery_process(d, owner=owner) for d in ordered]
    finally:
        _after_batch({d.subscription for d in deliveries})


def _after_batch(subscriptions: set[str]) -> None:
    for name in sorted(subscriptions):
        path = SUBSCRIPTIONS[name].after_batch
        if path is None:
            continue
        try:
            import_string(path)()
        except Exception:
            # The deliveries are done; what failed here is a best-effort send.
            log.exception("after-batch step of %s failed", name)


def delivery_process(delivery: Delivery, *, owner: str) -> Outcome:
    """Run one claimed delivery's effect exactly once, or record why it failed.

    1. Out of attempts with a worker death behind it: dead letter, no run. A
       delivery that killed its worker before does not get its last attempt (it
       would most likely kill this one too): at the threshold it is isolated.
    2. Guard row + effect + done mark commit together; a guard already present means
       another worker finished it: mark done, no second effect.
    3. On an exception: schedule the retry with backoff, or dead-letter at the limit.
    """
    subscription = SUBSCRIPTIONS[delivery.subscription]
    deaths = delivery.attempts - 1 - delivery.failures
    out_of_attempts = delivery.attempts > subscription.max_attempts or (
        delivery.attempts >= subscription.max_attempts and deaths > 0
    )
    if out_of_attempts:
        reason = f"the worker died during {deaths} earlier attempt(s)"
        _dead_letter(delivery, subscription, reason)
        return Outcome(delivery.pk, "dead")
    try:
        if subscription.outside is not None:
            import_string(subscription.outside)(delivery.message)
        with transaction.atomic():
            return _apply(delivery, owner)
    except _LeaseLost:
        return Outcome(delivery.pk, "lost_lease")
    except Exception as error:
        return _record_failure(delivery, subscription, error)


def _apply(delivery: Delivery, owner: str) -> Outcome:
    """Guard row, effect and done mark. Call inside ``atomic()``; raises on failure."""
    subscription = SUBSCRIPTIONS[delivery.subscription]
    handler: Handler = import_string(subscription.handler)
    try:
        with transaction.atomic():
            ProcessedMessage.objects.create(
                subscription=delivery.subscription, message_id=delivery.message_id
            )
    except IntegrityError:
        _mark_done(delivery, owner)
        return Outcome(delivery.pk, "duplicate")
    handler(delivery.message)
    if not _mark_done(delivery, owner):
        # Our lease ran out and another worker owns the row now: undo our effect
        # and let the owner finish (its guard insert will succeed).
        raise _LeaseLost
    return Outcome(delivery.pk, "done")


class _LeaseLost(Exception):
    pass


def _mark_done(delivery: Delivery, owner: str) -> bool:
    return (
        Delivery.objects.filter(
            pk=delivery.pk, lease_owner=owner, status=Delivery.Status.PENDING
        ).update(status=Delivery.Status.DONE, done_at=timezone.now(), leased_until=None)
        == 1
    )


def _error_text(error: BaseException) -> str:
    last = traceback.format_exception_only(type(error), error)[-1].strip()
    return last[:2000]


def _record_failure(
    delivery: Delivery, subscription: Subscription, error: Exception
) -> Outcome:
    text = _error_text(error)
    log.warning(
        "delivery %s (%s) attempt %s failed: %s",
        delivery.pk,
        delivery.subscription,
        delivery.attempts,
        text,
    )
    if delivery.attempts >= subscription.max_attempts:
        _dead_letter(delivery, subscription, text)
        return Outcome(delivery.pk, "dead")
    now = timezone.now()
    wait = subscription.backoff.full_jitter_ms(delivery.attempts, _random.random)
    Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.PENDING).update(
        available_at=now + datetime.timedelta(milliseconds=wait),
        leased_until=None,
        failures=F("failures") + 1,
        last_error=text,
        first_failed_at=delivery.first_failed_at or now,
        last_failed_at=now,
    )
    return Outcome(delivery.pk, "retry")


def _dead_letter(delivery: Delivery, subscription: Subscription, error: str) -> None:
    now = timezone.now()
    with transaction.atomic():
        Delivery.objects.filter(pk=delivery.pk).update(
            status=Delivery.Status.DEAD,
            leased_until=None,
            last_error=error,
            first_failed_at=delivery.first_failed_at or now,
            last_failed_at=now,
        )
        DeadLetter.objects.update_or_create(
            delivery=delivery,
            defaults={
                "subscription": subscription.name,
                "message_type": delivery.message.type,
                "body": delivery.message.body,
                "attempts": delivery.attempts,
                "last_error": error,
                "first_failed_at": delivery.first_failed_at or now,
                "last_failed_at": now,
                "redriven_at": None,
            },
        )
    log.error(
        "delivery %s (%s) dead-lettered after %s attempts: %s",
        delivery.pk,
        subscription.name,
        delivery.attempts,
        error,
    )


# --- Drain --------------------------------------------------------------------


@dataclass
class DrainReport:
    relayed: int = 0
    done: int = 0
    duplicates: int = 0
    retried: int = 0
    dead: int = 0
    lost_leases: int = 0
    streamed: int = 0

    def add(self, outcome: Outcome) -> None:
        field = {
            "done": "done",
            "duplicate": "duplicates",
            "retry": "retried",
            "dead": "dead",
            "lost_lease": "lost_leases",
        }[outcome.result]
        setattr(self, field, getattr(self, field) + 1)


def messaging_drain(
    *, owner: str, batch: int = 20, budget_seconds: float = 10.0, lane: str = "main"
) -> DrainReport:
    """Relay and process ``lane`` until nothing is due or the time budget is spent.

    One step: relay new messages, claim a batch, process it, give each partition
    with work a turn, and (main lane) move the stream consumers on. The budget keeps
    one rq job from holding a worker forever; the caller re-nudges when work remains.
    """
    from messaging.partitions import partitions_drain
    from messaging.streams import streams_advance

    report = DrainReport()
    started = timezone.now()
    deadline = started + datetime.timedelta(seconds=budget_seconds)
    while timezone.now() < deadline:
        report.relayed += relay_pending()
        claimed = deliveries_claim(owner=owner, limit=batch, lane=lane)
        for outcome in deliveries_process(claimed, owner=owner):
            report.add(outcome)
        ordered = partitions_drain(owner=owner, lane=lane, deadline=deadline)
        for outcome in ordered:
            report.add(outcome)
        moved = streams_advance() if lane == "main" else 0
        report.streamed += moved
        if not claimed and not ordered and not moved:
            break
    return report


def work_remaining(now: datetime.datetime | None = None, *, lane: str = "main") -> bool:
    """Return whether anything is waiting for a drain of ``lane`` right now."""
    from messaging.partitions import partition_work
    from messaging.streams import streams_behind

    now = now or timezone.now()
    names = lane_subscriptions(lane)
    return (
        OutboxMessage.objects.filter(relayed_at__isnull=True).exists()
        or Delivery.objects.filter(
            _due(now), partition__isnull=True, subscription__in=names
        ).exists()
        or partition_work(now, lane=lane)
        or (lane == "main" and streams_behind())
    )


# --- Dead letters -------------------------------------------------------------


def deadletter_redrive(*, ids: Iterable[int], user: AbstractBaseUser | None) -> int:
    """Send dead letters back: attempts reset, available now; return how many.

    Only open dead letters are redriven, so a double click redrives once.
    """
    now = timezone.now()
    with transaction.atomic():
        letters = list(
            DeadLetter.objects.select_for_update()
            .filter(pk__in=list(ids), redriven_at__isnull=True)
            .select_related("delivery")
        )
        for letter in letters:
            Delivery.objects.filter(pk=letter.delivery_id).update(
                status=Delivery.Status.PENDING,
                attempts=0,
                failures=0,
                available_at=now,
                leased_until=None,
                lease_owner="",
            )
        DeadLetter.objects.filter(pk__in=[x.pk for x in letters]).update(
            redriven_at=now, redriven_by=user, redrive_count=F("redrive_count") + 1
        )
        if letters:
            from messaging.tasks import nudge_drain

            transaction.on_commit(nudge_drain)
    return len(letters)
