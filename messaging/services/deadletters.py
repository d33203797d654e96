"""Dead letters: send them back for another round of attempts."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from messaging.models import DeadLetter, Delivery


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
