"""Freeing a partition held by a worker that died: its lease and its head's lease.

A worker processing an ordered partition holds two leases: the partition's
(``PartitionLease``) and the head delivery's (``Delivery.leased_until``). Both end by
themselves, after the subscription's lease length: until then the partition waits,
whatever stands behind its head (``messaging.services.partitions``). With a long
lease (``MESSAGING_LEASE_SECONDS`` raised for slow handlers) a worker killed in the
middle of a head (the OOM killer, a deploy's SIGKILL) stops its partition for that
long.

``partition_dead_leases_release`` frees both at once, only when the owner is shown
dead (``jobs.holders``: a process of this host that no longer runs). The head's
attempt stays counted, so the next worker treats it as a delivery whose worker
died: a head that keeps killing workers is isolated into the dead letters by the
usual rule (``messaging.services.process``), and the partition flows again. A
holder that may still run keeps its leases: freeing them would let a second worker
apply the head's effect beside the first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from jobs.holders import holder_state
from messaging import dispatch
from messaging.models import Delivery, PartitionLease

log = logging.getLogger("messaging")


class LeaseReleaseError(ValueError):
    """A release refused; its text says why and can be shown to the operator."""


@dataclass(frozen=True)
class Released:
    """One partition freed: its former owner and the head deliveries let go."""

    subscription: str
    partition: int
    owner: str
    deliveries: int
    explanation: str


def partition_holder_dead(lease: PartitionLease) -> bool:
    """Return whether the partition is held, now, by a process shown dead."""
    if not lease.owner or lease.leased_until is None:
        return False
    if lease.leased_until < timezone.now():
        return False  # expired: free for the next worker already
    return holder_state(lease.owner).dead


def partition_dead_leases_release(
    *, lease_id: int, user: AbstractBaseUser | None
) -> Released:
    """Free the partition ``lease_id`` and its deliveries' leases from a dead owner.

    Raises ``LeaseReleaseError`` (its text is for the operator) when the partition is
    not held, or its holder may still run.
    """
    now = timezone.now()
    with transaction.atomic():
        lease = PartitionLease.objects.select_for_update().filter(pk=lease_id).first()
        if lease is None:
            raise LeaseReleaseError("That partition no longer exists.")
        where = f"{lease.subscription}[{lease.partition}]"
        if not lease.owner or lease.leased_until is None or lease.leased_until < now:
            raise LeaseReleaseError(f"{where} is not held: its lease is free already.")
        state = holder_state(lease.owner)
        if not state.dead:
            raise LeaseReleaseError(
                f"{where} is held by {lease.owner}, and {state.explanation}: freeing "
                "it could let two workers apply its head at once. Wait for its lease "
                "to run out."
            )
        owner = lease.owner
        freed = Delivery.objects.filter(
            subscription=lease.subscription,
            partition=lease.partition,
            status=Delivery.Status.PENDING,
            lease_owner=owner,
        ).update(leased_until=None, lease_owner="")
        PartitionLease.objects.filter(pk=lease.pk, owner=owner).update(
            owner="", leased_until=None
        )
        if user is not None:
            LogEntry.objects.log_actions(
                user.pk,
                [lease],
                CHANGE,
                f"Freed from {owner} ({state.explanation}); {freed} delivery lease(s).",
            )
        transaction.on_commit(dispatch.nudge_drain)
    log.warning(
        "%s freed from dead worker %s by %s (%s deliveries)",
        where,
        owner,
        user.get_username() if user else "-",
        freed,
    )
    return Released(
        lease.subscription, lease.partition, owner, freed, state.explanation
    )
