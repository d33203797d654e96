"""Process claimed deliveries: each effect exactly once, or a recorded failure.

Every effect happens at most once per subscription and message (the guard row
commits with the effect), and at least once while attempts remain (leases expire,
the sweep re-nudges): together, exactly once.
"""

from __future__ import annotations

import datetime
import functools
import logging
import random
import traceback
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from messaging.models import DeadLetter, Delivery, ProcessedMessage
from messaging.registry import (
    AFTER_BATCH,
    HANDLERS,
    OUTSIDE,
    SUBSCRIPTIONS,
    Subscription,
    group_handler_for,
)
from messaging.services.rows import column, table

log = logging.getLogger("messaging")

_random = random.SystemRandom()


@dataclass(frozen=True)
class Outcome:
    delivery_id: int
    result: str  # "done", "duplicate", "retry", "dead", "lost_lease"


def deliveries_process(deliveries: list[Delivery], *, owner: str) -> list[Outcome]:
    """Process a claimed batch: its group in one transaction, the rest one by one.

    The group (the deliveries the claim marked, see ``claim.groupable``: fresh ones
    only) commits every guard row, effect and done mark in one transaction: one
    commit for the group instead of one per delivery. That used to make every crash
    cost the whole batch an attempt and push innocent batch-mates toward the dead
    letters; it no longer does, because the claim counted the group's attempt as a
    group try (``Delivery.group_tries``): if the worker dies, the survivors are
    retried alone (the claim takes a delivery tried before only one at a time), the
    group try counts against nobody's ``max_attempts``, and only the real poison
    accumulates deaths on its solo attempts (``death_count``: once it has killed a
    worker alone, the group's death is blamed on it too). If the group fails without
    dying (a handler raises, a guard or lease races), it is rolled back and each
    delivery runs alone in this same claim, its try now its own.

    Deliveries tried before come last: one of them may be what kills workers.
    """
    group = [d for d in deliveries if _in_group(d)]
    solo = sorted(
        (d for d in deliveries if not _in_group(d)), key=lambda d: d.attempts > 1
    )
    try:
        outcomes = _group_process(group, owner=owner) if group else []
        return outcomes + [delivery_process(d, owner=owner) for d in solo]
    finally:
        after_batch_run({d.subscription for d in deliveries})


def _in_group(delivery: Delivery) -> bool:
    # Only a first attempt is ever taken in a group, so this one is that try.
    return delivery.attempts == 1 and delivery.group_tries == 1


def group_commit(group: list[Delivery], *, owner: str) -> list[Outcome] | None:
    """Commit the group's guards, effects and done marks at once; None if it failed.

    The handlers run in the order of ``group``, so a partition's run stays in
    offset order. On a failure everything is rolled back and the caller decides
    how its members run alone.
    """
    try:
        with transaction.atomic():
            return _group_apply(group, owner)
    except Exception as error:
        log.info(
            "group of %s deliveries fell back to one by one: %s", len(group), error
        )
    return None


def _group_process(group: list[Delivery], *, owner: str) -> list[Outcome]:
    """Commit the group at once, or fall back to one transaction per delivery."""
    committed = group_commit(group, owner=owner)
    if committed is not None:
        return committed
    outcomes = []
    for delivery in group:
        if not _group_try_undo(delivery, owner):
            outcomes.append(Outcome(delivery.pk, "lost_lease"))
            continue
        outcomes.append(delivery_process(delivery, owner=owner))
    return outcomes


def _group_apply(group: list[Delivery], owner: str) -> list[Outcome]:
    """Guard rows (one INSERT), effects, done marks (one UPDATE). Inside ``atomic()``.

    Raises on any failure, which rolls back the whole group: a guard inserted by
    another worker meanwhile (IntegrityError, on SQLite; PostgreSQL skips it, see
    ``_guards_insert``), a handler's exception, a lease lost.
    """
    new = _guards_insert(group)
    fresh = [d for d in group if (d.subscription, d.message_id) in new]
    applied = {d.pk for d in fresh}
    _group_effects(fresh)
    marked = Delivery.objects.filter(
        pk__in=[d.pk for d in group], lease_owner=owner, status=Delivery.Status.PENDING
    ).update(status=Delivery.Status.DONE, done_at=timezone.now(), leased_until=None)
    if marked != len(group):
        raise _LeaseLost
    return [Outcome(d.pk, "done" if d.pk in applied else "duplicate") for d in group]


def _guards_insert(group: list[Delivery]) -> set[tuple[str, int]]:
    """Insert the group's guard rows; return the (subscription, message) of the
    new ones: the others' effects happened already. Inside ``atomic()``.

    On PostgreSQL one statement (``INSERT ... ON CONFLICT DO NOTHING RETURNING``):
    a guard another worker is inserting meanwhile waits for its commit and is then
    skipped, so the group goes on without that effect instead of rolling back.
    """
    if connection.vendor == "postgresql":
        return _guards_insert_returning(group)
    return _guards_insert_orm(group)


def _guards_insert_orm(group: list[Delivery]) -> set[tuple[str, int]]:
    """The guards read, then the missing ones inserted (a race raises)."""
    taken = set(
        ProcessedMessage.objects.filter(
            subscription__in={d.subscription for d in group},
            message_id__in={d.message_id for d in group},
        ).values_list("subscription", "message_id")
    )
    new = [d for d in group if (d.subscription, d.message_id) not in taken]
    ProcessedMessage.objects.bulk_create(
        [
            ProcessedMessage(subscription=d.subscription, message_id=d.message_id)
            for d in new
        ]
    )
    return {(d.subscription, d.message_id) for d in new}


def _guards_insert_returning(group: list[Delivery]) -> set[tuple[str, int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            _guards_sql(),
            [
                timezone.now(),
                [d.subscription for d in group],
                [d.message_id for d in group],
            ],
        )
        return {(name, message) for name, message in cursor.fetchall()}


@functools.cache
def _guards_sql() -> str:
    guard = table(ProcessedMessage)
    name, message, at = (
        column(ProcessedMessage, field)
        for field in ("subscription", "message", "processed_at")
    )
    # Starts with its verb, as the ORM's statements do (what counts them sees it).
    return f"""INSERT INTO {guard} ({name}, {message}, {at})
        SELECT g.name, g.message, %s
        FROM unnest(%s::varchar[], %s::bigint[]) AS g(name, message)
        ON CONFLICT ({name}, {message}) DO NOTHING
        RETURNING {name}, {message}
    """


def _group_effects(fresh: list[Delivery]) -> None:
    """Run the group's effects: a subscription's group handler takes all of its
    messages at once (in offset order), the others run message by message."""
    by_subscription: dict[str, list[Delivery]] = {}
    for delivery in sorted(fresh, key=lambda d: d.message_id):
        by_subscription.setdefault(delivery.subscription, []).append(delivery)
    for name, deliveries in by_subscription.items():
        together = group_handler_for(name)
        if together is not None and len(deliveries) > 1:
            together([d.message for d in deliveries])
            continue
        for delivery in deliveries:
            HANDLERS[name](delivery.message)


def _group_try_undo(delivery: Delivery, owner: str) -> bool:
    """Make a failed group's try the delivery's own attempt; False if no longer ours."""
    undone = Delivery.objects.filter(
        pk=delivery.pk, lease_owner=owner, status=Delivery.Status.PENDING
    ).update(group_tries=F("group_tries") - 1)
    delivery.group_tries -= undone
    return undone == 1


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
    tries = _own_attempts(delivery)
    deaths = death_count(delivery.attempts, delivery.failures, delivery.group_tries)
    out_of_attempts = tries > subscription.max_attempts or (
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


def death_count(attempts: int, failures: int, group_tries: int) -> int:
    """Return the earlier attempts of a delivery that ended with its worker dead.

    ``attempts - 1 - failures`` tries went silent (the current one is not over). A
    dying group's try says nothing about which member killed the worker, so it is
    blamed on nobody, until a delivery kills a worker on its own: then the group it
    was in most likely died of it too, and the group try counts as its death. That
    keeps an innocent batch-mate's attempts whole, and a poison message that arrived
    in a group still costs no more deaths than ``max_attempts - 1``.
    """
    silent = attempts - 1 - failures
    return silent if silent - group_tries > 0 else 0


def _own_attempts(delivery: Delivery) -> int:
    """Attempts that were the delivery's own: a dying group's tries are not."""
    return delivery.attempts - delivery.group_tries


def _apply(delivery: Delivery, owner: str) -> Outcome:
    """Guard row, effect and done mark. Call inside ``atomic()``; raises on failure."""
    subscription = SUBSCRIPTIONS[delivery.subscription]
    handler = HANDLERS[subscription.name]
    if not _guard_insert(delivery):
        _mark_done(delivery, owner)
        return Outcome(delivery.pk, "duplicate")
    handler(delivery.message)
    if not _mark_done(delivery, owner):
        # Our lease ran out and another worker owns the row now: undo our effect
        # and let the owner finish (its guard insert will succeed).
        raise _LeaseLost
    return Outcome(delivery.pk, "done")


def _guard_insert(delivery: Delivery) -> bool:
    """Insert the delivery's guard row; False if it was there (the effect happened).

    PostgreSQL's ``ON CONFLICT DO NOTHING`` says so in one statement; elsewhere a
    savepoint catches the unique violation (three statements).
    """
    if connection.vendor == "postgresql":
        return bool(_guards_insert_returning([delivery]))
    try:
        with transaction.atomic():
            ProcessedMessage.objects.create(
                subscription=delivery.subscription, message_id=delivery.message_id
            )
    except IntegrityError:
        return False
    return True


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
    if _own_attempts(delivery) >= subscription.max_attempts:
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
