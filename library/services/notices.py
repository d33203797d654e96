"""Overdue notices: the daily reminder of each open loan past its period."""

from __future__ import annotations

import datetime

from django.db import transaction

from library.models import Loan, Notification

# How long a loan may stay open before the daily run reminds its member.
LOAN_PERIOD_DAYS = 14
OVERDUE_KIND = "overdue"
_EPOCH_DAY = datetime.date(1970, 1, 1)
# Source ids of scheduled notifications: negative, so they never meet the outbox's
# positive message ids in Notification's unique column; one per loan and day.
_SOURCE_DAYS = 100_000


def overdue_source_id(loan_id: int, day: datetime.date) -> int:
    """Return the Notification.source_message_id of a loan's reminder on ``day``."""
    return -(loan_id * _SOURCE_DAYS + (day - _EPOCH_DAY).days)


def overdue_notifications_send(*, slot: datetime.datetime) -> int:
    """Remind every member of each open loan past its period; return how many new.

    Idempotent per day: the reminder's source id is derived from the loan and the
    slot's UTC day, and the column is unique, so a repeated or caught-up run of the
    same day writes nothing more.
    """
    day = slot.astimezone(datetime.UTC).date()
    overdue = (
        Loan.objects.filter(
            return_date__isnull=True,
            pickup_date__lt=day - datetime.timedelta(days=LOAN_PERIOD_DAYS),
        )
        .select_related("book")
        .order_by("id")
    )
    rows = {
        overdue_source_id(loan.pk, day): Notification(
            member_id=loan.member_id,
            loan_id=loan.pk,
            kind=OVERDUE_KIND,
            text=f"“{loan.book.title}” was due back "
            f"{loan.pickup_date + datetime.timedelta(days=LOAN_PERIOD_DAYS)}."[:300],
            source_message_id=overdue_source_id(loan.pk, day),
        )
        for loan in overdue
    }
    with transaction.atomic():
        sent = set(
            Notification.objects.filter(source_message_id__in=list(rows)).values_list(
                "source_message_id", flat=True
            )
        )
        fresh = [row for key, row in rows.items() if key not in sent]
        # ignore_conflicts: a concurrent run of the same day (lease expired under a
        # stalled holder) cannot make this one fail half-way.
        Notification.objects.bulk_create(fresh, batch_size=500, ignore_conflicts=True)
    return len(fresh)
