"""Subscription states: whether a subscription is active and where it starts."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Max

from messaging.models import OutboxMessage, SubscriptionState
from messaging.registry import SUBSCRIPTIONS


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
