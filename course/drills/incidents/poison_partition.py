"""Drill: a poison message at the head of a ``book_ledger`` partition.

Seeding (in the sandbox): stock corrections run through the library's service, and
the ledger records them. Then one correction goes out without its book version (a
publisher that dropped the field): the ledger cannot apply it. Its first attempt
fails for real; its second attempt's worker is killed in the middle (a deploy's
SIGKILL), holding the head's lease and the partition's lease. With this site's long
leases (the drill gives them half an hour), the partition stops at its head while
six more changes of its books queue behind it; the other partitions flow.

The lever: the Partitions admin's "Free partitions held by a dead worker…"
(``messaging.services.leases``). The next worker then finds a head whose worker
died at its last allowed attempt and isolates it as a dead letter without running
it; the partition flows. The poison cannot ever apply (no version in its body): it
is to be discarded, not redriven.

The checker: nothing pending in the partition, every good change in the ledger once
and in order, the poison's letter discarded, no letter open.
"""

from __future__ import annotations

import datetime
import traceback
from typing import Final

from django.db.models import Count
from django.utils import timezone

from course.drills.incidents.common import (
    SOON,
    Findings,
    Verdict,
    dead_process_token,
    drain_all,
    settle,
)
from jobs.holders import holder_state
from library.models import Book, BookLedger
from library.services import stock_correct
from library.subscribers import ledger_append
from messaging.models import DeadLetter, Delivery, OutboxMessage, PartitionLease
from messaging.policies import partition_of
from messaging.registry import SUBSCRIPTIONS
from messaging.services import relay_pending
from messaging.services.partitions import partition_work

SUBSCRIPTION: Final = "book_ledger"
PARTITION: Final = 2
BEHIND: Final = 6
BESIDE: Final = 6
HELD_FOR: Final = datetime.timedelta(minutes=30)


def _books() -> tuple[list[int], list[int]]:
    """Three books of the poisoned partition, three of the others."""
    count = SUBSCRIPTIONS[SUBSCRIPTION].partitions
    ids = list(
        Book.objects.filter(on_shelf__gte=1).order_by("id").values_list("pk", flat=True)
    )
    same = [b for b in ids if partition_of(str(b), count) == PARTITION][:3]
    other = [b for b in ids if partition_of(str(b), count) != PARTITION][:3]
    return same, other


def _shelf(book_id: int) -> int:
    return Book.objects.values_list("on_shelf", flat=True).get(pk=book_id)


def _correct(book_id: int, delta: int) -> int:
    """One real stock-take of the book; return its message's offset."""
    stock_correct(book_id=book_id, on_shelf=max(0, _shelf(book_id) + delta))
    newest = OutboxMessage.objects.filter(key=str(book_id)).order_by("-id").first()
    assert newest is not None
    return newest.pk


def _error_text(message: OutboxMessage) -> str:
    """What the ledger's handler says about the message (its real failure)."""
    try:
        ledger_append(message)
    except Exception as error:
        return traceback.format_exception_only(type(error), error)[-1].strip()
    raise RuntimeError("the poison message applied")


def seed() -> dict[str, str]:
    same, other = _books()
    for book in same + other:
        _correct(book, -1)
    drain_all()  # the ledger's history, every partition flowing
    poison = _correct(same[0], +1)
    body = dict(OutboxMessage.objects.get(pk=poison).body)
    body.pop("book_version")
    OutboxMessage.objects.filter(pk=poison).update(body=body)
    for n in range(max(BEHIND, BESIDE)):
        if n < BEHIND:
            _correct(same[n % len(same)], 1 if n % 2 else -1)
        if n < BESIDE:
            _correct(other[n % len(other)], 1 if n % 2 else -1)
    relay_pending()
    _poison_held(poison)
    drain_all()  # everything else; the held partition waits
    return {}


def _poison_held(poison: int) -> None:
    """The head's history: attempt 1 failed, attempt 2's worker died holding it."""
    now = timezone.now()
    failed_at = now - datetime.timedelta(minutes=7)
    owner = dead_process_token()
    head = Delivery.objects.get(message_id=poison, subscription=SUBSCRIPTION)
    Delivery.objects.filter(pk=head.pk).update(
        attempts=2,
        failures=1,
        last_error=_error_text(OutboxMessage.objects.get(pk=poison)),
        first_failed_at=failed_at,
        last_failed_at=failed_at,
        lease_owner=owner,
        leased_until=now + HELD_FOR,
    )
    PartitionLease.objects.update_or_create(
        subscription=SUBSCRIPTION,
        partition=PARTITION,
        defaults={"owner": owner, "leased_until": now + HELD_FOR},
    )
    OutboxMessage.objects.filter(pk__gte=poison).update(
        created_at=now - datetime.timedelta(minutes=8)
    )


# --- the checker -------------------------------------------------------------------


def _is_poison(body: object) -> bool:
    return not (isinstance(body, dict) and isinstance(body.get("book_version"), int))


def _moving() -> bool:
    """Whether a worker has a partition to take, or is working one through.

    A head whose retry is due within moments counts as moving; a partition held by
    a dead worker does not: that is what is judged.
    """
    now = timezone.now()
    if partition_work(now + SOON):
        return True
    held = PartitionLease.objects.filter(
        subscription=SUBSCRIPTION, leased_until__gt=now
    ).exclude(owner="")
    return any(not holder_state(lease.owner).dead for lease in held)


def check() -> Verdict:
    still = settle(_moving)
    found = Findings()
    copies = list(
        Delivery.objects.filter(subscription=SUBSCRIPTION).select_related("message")
    )
    poison = [d for d in copies if _is_poison(d.message.body)]
    good = [d for d in copies if not _is_poison(d.message.body)]
    pending = [d for d in copies if d.status == Delivery.Status.PENDING]
    found.add(
        not [d for d in pending if d.partition == PARTITION],
        f"Partition {PARTITION} of {SUBSCRIPTION} has nothing pending: it flows.",
        f"Partition {PARTITION} still has "
        f"{sum(1 for d in pending if d.partition == PARTITION)} change(s) waiting "
        "behind its head.",
    )
    recorded = BookLedger.objects.filter(message_id__in=[d.message_id for d in good])
    done = sum(1 for d in good if d.status == Delivery.Status.DONE)
    found.add(
        done == len(good) == recorded.count(),
        f"All {len(good)} good changes are in the ledger.",
        f"{len(good) - recorded.count()} of the {len(good)} good changes are not in "
        "the ledger yet.",
    )
    twice = recorded.values("message_id").annotate(n=Count("id")).filter(n__gt=1)
    disordered = BookLedger.objects.filter(in_order=False).count()
    found.add(
        not twice.exists() and disordered == 0,
        "Each change was recorded once, and every book's changes in order.",
        f"{disordered} ledger row(s) arrived out of order"
        + (", and some changes were recorded twice" if twice.exists() else "")
        + ".",
    )
    letters = DeadLetter.objects.filter(delivery__in=[d.pk for d in poison])
    discarded = letters.filter(discarded_at__isnull=False).count()
    found.add(
        len(poison) == 1 and discarded == 1,
        "The change without a book version is dead-lettered and discarded: it can "
        "never apply, and a redrive would only fail again.",
        "The change without a book version is "
        + (
            "not in the dead letters yet (its partition is still held)"
            if not letters.exists()
            else "not discarded: no redrive can apply a body without a version"
        )
        + ".",
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
