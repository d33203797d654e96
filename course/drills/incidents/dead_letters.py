"""Drill: a cluster of dead letters left by a bad deploy, and two that are really bad.

Seeding (in the sandbox): a dozen loans are issued through the library's own
service. While their notifications are delivered, the ``notification`` handler is
swapped for one that fails the way a deploy whose migration had not run yet would:
every attempt raises the same error, each delivery uses its five attempts through
the real claim and retry path and lands in the dead letters, one cluster. Then the
real handler is bound again (the deploy was rolled back).

Two more loan messages name a book that does not exist (a bulk import with wrong
ids); the real handler fails on them, for good, and they die in a cluster of their
own. Redriving those only kills them again: they are to be discarded.

The checker: every deploy-window notification written exactly once, the two bad
letters archived (discarded) and nothing open or still failing.
"""

from __future__ import annotations

import datetime
from typing import Final

from django.db import ProgrammingError, transaction
from django.db.models import Count, Max
from django.utils import timezone

from course.drills.incidents.common import (
    Findings,
    Verdict,
    deliveries_in_flight,
    drain_all,
    settle,
)
from library.models import Book, Branch, Member, Notification
from library.services import loan_issue
from messaging.models import DeadLetter, Delivery
from messaging.registry import HANDLERS, MessageType
from messaging.services import outbox_publish

SUBSCRIPTION: Final = "notification"
LOANS: Final = 12
BAD: Final = 2
DEPLOY_ERROR: Final = (
    'column "channel" of relation "library_notification" does not exist'
)


def _broken_handler(message: object) -> None:
    """The handler of the bad deploy: its table's new column was not there yet."""
    raise ProgrammingError(DEPLOY_ERROR)


def _retry_until_dead() -> None:
    """Drain, making each waiting retry due at once, until no copy is pending."""
    for _ in range(20):
        drain_all()
        waiting = Delivery.objects.filter(
            subscription=SUBSCRIPTION, status=Delivery.Status.PENDING
        )
        if not waiting.exists():
            return
        waiting.update(available_at=timezone.now())
    raise RuntimeError("the notification copies did not die within 20 rounds")


def _issue_loans() -> list[int]:
    books = list(
        Book.objects.filter(on_shelf__gte=2).order_by("id").values_list("pk", flat=True)
    )
    members = list(Member.objects.order_by("id").values_list("pk", flat=True)[:LOANS])
    for n in range(LOANS):
        loan_issue(book_id=books[n * 7 % len(books)], member_id=members[n])
    return members


def _publish_bad(members: list[int]) -> None:
    """Two loan messages that name no existing book (wrong ids from an import)."""
    missing = (Book.objects.aggregate(n=Max("id"))["n"] or 0) + 100_000
    branch = Branch.objects.order_by("id").first()
    assert branch is not None
    with transaction.atomic():
        for n in range(BAD):
            outbox_publish(
                type=MessageType.LOAN_ISSUED,
                key=missing + n,
                body={
                    "loan_id": 0,
                    "book_id": missing + n,
                    "member_id": members[n],
                    "branch_id": branch.pk,
                    "on_shelf": 0,
                    "book_version": 1,
                    "branch_version": 1,
                    "branch_total": 0,
                },
            )


def _backdate(minutes_ago: int, span: int) -> None:
    """Place the letters in the deploy window, oldest first (times only)."""
    now = timezone.now()
    letters = list(DeadLetter.objects.order_by("pk"))
    for n, letter in enumerate(letters):
        first = now - datetime.timedelta(minutes=minutes_ago - n * span / len(letters))
        last = first + datetime.timedelta(minutes=3)
        DeadLetter.objects.filter(pk=letter.pk).update(
            first_failed_at=first, last_failed_at=last
        )
        Delivery.objects.filter(pk=letter.delivery_id).update(
            first_failed_at=first, last_failed_at=last
        )


def seed() -> dict[str, str]:
    members = _issue_loans()
    real = HANDLERS[SUBSCRIPTION]
    HANDLERS[SUBSCRIPTION] = _broken_handler
    try:
        _retry_until_dead()
    finally:
        HANDLERS[SUBSCRIPTION] = real
    _publish_bad(members)
    _retry_until_dead()
    _backdate(minutes_ago=45, span=20)
    return {"The deploy": "broken from about 45 to 25 minutes before you started"}


# --- the checker -------------------------------------------------------------------


def _book_exists(body: object) -> bool:
    book_id = body.get("book_id") if isinstance(body, dict) else None
    return isinstance(book_id, int) and Book.objects.filter(pk=book_id).exists()


def check() -> Verdict:
    still = settle(lambda: deliveries_in_flight([SUBSCRIPTION]))
    found = Findings()
    copies = list(
        Delivery.objects.filter(subscription=SUBSCRIPTION).select_related("message")
    )
    good = [d for d in copies if _book_exists(d.message.body)]
    bad = [d for d in copies if not _book_exists(d.message.body)]
    done = [d for d in good if d.status == Delivery.Status.DONE]
    written = Notification.objects.filter(
        source_message_id__in=[d.message_id for d in good]
    )
    twice = (
        written.values("source_message_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    found.add(
        len(done) == len(good) and written.count() == len(good),
        f"All {len(good)} loans of the deploy window have their notification, "
        "written by the notification subscription.",
        f"{len(good) - len(done)} of the {len(good)} loans of the deploy window still "
        "have no notification: their letters wait for a redrive (the cause is gone: "
        "the handler works again).",
    )
    found.add(
        twice == 0,
        "No notification was written twice.",
        f"{twice} message(s) have more than one notification.",
    )
    letters = DeadLetter.objects.filter(delivery__in=[d.pk for d in bad])
    archived = letters.filter(discarded_at__isnull=False).count()
    retried = sum(1 for d in bad if d.status == Delivery.Status.PENDING)
    found.add(
        archived == len(bad) == BAD and retried == 0,
        f"The {BAD} letters naming a book that does not exist are discarded, with a "
        "reason on record.",
        f"{len(bad) - archived} of the {len(bad)} letters naming a book that does "
        "not exist are not discarded"
        + (f" ({retried} redriven and failing again)" if retried else "")
        + ": no redrive can apply them, so they belong in the archive.",
    )
    open_letters = DeadLetter.objects.filter(
        redriven_at__isnull=True, discarded_at__isnull=True
    ).count()
    found.add(
        open_letters == 0,
        "No dead letter is left open.",
        f"{open_letters} dead letter(s) are still open.",
    )
    return found.verdict(settling=still)
