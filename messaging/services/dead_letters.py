"""Dead letters: send them back for another round of attempts, or archive them.

Both actions take only open letters (neither redriven nor discarded), so a double
click acts once, and both record who acted and when on the letter and in the admin
log (``LogEntry``), in the transaction that makes the change.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from messaging import dispatch
from messaging.errors import DeadLetterError
from messaging.models import DeadLetter, Delivery

log = logging.getLogger("messaging")

DISCARD_REASON_MAX = 500


def _open_locked() -> QuerySet[DeadLetter]:
    """Return open letters, locked. Call inside ``atomic()``."""
    return DeadLetter.objects.select_for_update().filter(
        redriven_at__isnull=True, discarded_at__isnull=True
    )


def _record(user: AbstractBaseUser | None, pks: list[int], message: str) -> None:
    """Write one admin log entry per letter. Call inside the change's ``atomic()``."""
    if user is None or not pks:
        return  # a lab or a script acted: there is no operator to name
    letters = DeadLetter.objects.filter(pk__in=pks).select_related("delivery")
    LogEntry.objects.log_actions(user.pk, letters, CHANGE, message)


def _redrive(
    letters: list[DeadLetter], *, user: AbstractBaseUser | None, now: datetime.datetime
) -> int:
    """Reset the letters' deliveries, due now. Call inside ``atomic()`` holding them."""
    if not letters:
        return 0
    pks = [x.pk for x in letters]
    Delivery.objects.filter(pk__in=[x.delivery_id for x in letters]).update(
        status=Delivery.Status.PENDING,
        attempts=0,
        group_tries=0,
        failures=0,
        available_at=now,
        leased_until=None,
        lease_owner="",
    )
    DeadLetter.objects.filter(pk__in=pks).update(
        redriven_at=now, redriven_by=user, redrive_count=F("redrive_count") + 1
    )
    _record(user, pks, "Redriven.")
    transaction.on_commit(dispatch.nudge_drain)
    log.info(
        "%s dead letter(s) redriven by %s: %s",
        len(pks),
        user.get_username() if user else "-",
        pks,
    )
    return len(pks)


def dead_letter_redrive(*, ids: Iterable[int], user: AbstractBaseUser | None) -> int:
    """Send dead letters back: attempts reset, available now; return how many.

    Only open dead letters are redriven, so a double click redrives once.
    """
    now = timezone.now()
    with transaction.atomic():
        letters = list(_open_locked().filter(pk__in=list(ids)))
        return _redrive(letters, user=user, now=now)


def dead_letter_redrive_cluster(
    *,
    subscription: str,
    signature: str,
    failed_upto: datetime.datetime,
    user: AbstractBaseUser | None,
) -> int:
    """Redrive one cluster's open letters that went dead by ``failed_upto``.

    A cluster is a subscription and an error signature (``DeadLetter.error_signature``).

    ``failed_upto`` is when the operator was shown the cluster: a letter that joined
    it later (a new one, or one that died again) was not seen, with its warnings,
    so it stays for the next look.
    """
    now = timezone.now()
    with transaction.atomic():
        letters = list(
            _open_locked().filter(
                subscription=subscription,
                error_signature=signature,
                last_failed_at__lte=failed_upto,
            )
        )
        return _redrive(letters, user=user, now=now)


def dead_letter_discard(
    *, ids: Iterable[int], user: AbstractBaseUser | None, reason: str
) -> int:
    """Archive open dead letters with who, when and why; return how many.

    A discarded letter leaves the open list and count but is kept: its delivery
    stays dead (so the log keeps its message, see ``log_trim``) and its record
    says why nobody will redrive it.
    """
    reason = reason.strip()
    if not reason:
        raise DeadLetterError("Say why the letters are discarded.")
    if len(reason) > DISCARD_REASON_MAX:
        raise DeadLetterError(
            f"Keep the reason under {DISCARD_REASON_MAX} characters "
            f"(it has {len(reason)})."
        )
    now = timezone.now()
    with transaction.atomic():
        pks = list(_open_locked().filter(pk__in=list(ids)).values_list("pk", flat=True))
        DeadLetter.objects.filter(pk__in=pks).update(
            discarded_at=now, discarded_by=user, discard_reason=reason
        )
        _record(user, pks, f"Discarded: {reason}")
    if pks:
        log.info(
            "%s dead letter(s) discarded by %s (%s): %s",
            len(pks),
            user.get_username() if user else "-",
            reason,
            pks,
        )
    return len(pks)
