"""Process claimed deliveries: each effect exactly once, or a recorded failure.

Every effect happens at most once per subscription and message (the guard row
commits with the effect), and at least once while attempts remain (leases expire,
the sweep re-nudges): together, exactly once.
"""

from __future__ import annotations

import datetime
import logging
import random
import traceback
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from messaging.models import DeadLetter, Delivery, ProcessedMessage
from messaging.registry import (
    AFTER_BATCH,
    HANDLERS,
    OUTSIDE,
    SUBSCRIPTIONS,
    Subscription,
)

log = logging.getLogger("messaging")

_random = random.SystemRandom()


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
        after_batch_run({d.subscription for d in deliveries})


def after_batch_run(subscriptions: set[str]) -> None:
    """Run the after-batch step of each of ``subscriptions`` that has one."""
    for name in sorted(subscriptions):
        flush = AFTER_BATCH.get(name) if SUBSCRIPTIONS[name].after_batch else None
        if flush is None:
            continue
        try:
            flush()
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
        if subscription.outside:
            OUTSIDE[subscription.name](delivery.message)
        with transaction.atomic():
            return _apply(delivery, owner)
    except _LeaseLost:
        return Outcome(delivery.pk, "lost_lease")
    except Exception as error:
        return _record_failure(delivery, subscription, error)


def _apply(delivery: Delivery, owner: str) -> Outcome:
    """Guard row, effect and done mark. Call inside ``atomic()``; raises on failure."""
    subscription = SUBSCRIPTIONS[delivery.subscription]
    handler = HANDLERS[subscription.name]
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
