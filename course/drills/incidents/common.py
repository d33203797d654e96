"""What every incident is made of: its verdict, an operator account, dead processes.

An incident's ``seed`` and ``check`` run inside the drill's sandbox (the agent,
``course.drills.agent``): the database and the Redis server they reach are the
sandbox's, never the operator's.
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from django.contrib.auth.models import Permission, User
from django.db.models import Q
from django.utils import timezone

from jobs.holders import holder_state
from messaging.models import Delivery
from messaging.services import messaging_drain

# How long a check waits for work it set moving (a redrive, a rewind) to settle.
SETTLE_S: Final = 20.0
# A retry due this soon is waited for rather than judged.
SOON: Final = datetime.timedelta(seconds=10)


@dataclass(frozen=True)
class Finding:
    """One thing the checker looked at: whether it holds, in a sentence."""

    ok: bool
    text: str


@dataclass(frozen=True)
class Verdict:
    """The checker's answer: passed when every finding holds."""

    findings: list[Finding]
    # Work was still moving when the check gave up waiting: look again shortly.
    settling: bool = False

    @property
    def passed(self) -> bool:
        return not self.settling and all(f.ok for f in self.findings)

    def as_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "settling": self.settling,
            "findings": [asdict(f) for f in self.findings],
        }


@dataclass
class Findings:
    """Collects findings in the order the checker makes them."""

    items: list[Finding] = field(default_factory=list)

    def add(self, ok: bool, good: str, bad: str) -> bool:
        self.items.append(Finding(ok, good if ok else bad))
        return ok

    def verdict(self, *, settling: bool = False) -> Verdict:
        return Verdict(list(self.items), settling=settling)


def operator_create(username: str, permissions: Iterable[str]) -> User:
    """Create the drill's operator: staff, the named permissions, no password.

    The learner signs in with the drill's one-time link (``course.drills.signin``),
    so the account never needs a password.
    """
    user = User.objects.create(username=username, is_staff=True)
    user.set_unusable_password()
    user.save(update_fields=["password"])
    wanted = Q()
    for name in permissions:
        app_label, codename = name.split(".", 1)
        wanted |= Q(content_type__app_label=app_label, codename=codename)
    found = list(Permission.objects.filter(wanted))
    if len(found) != len(set(permissions)):
        missing = set(permissions) - {
            f"{p.content_type.app_label}.{p.codename}" for p in found
        }
        raise LookupError(f"no such permission: {sorted(missing)}")
    user.user_permissions.set(found)
    return user


def dead_process_token() -> str:
    """Return a lease owner token (``host:pid:suffix``) of a process that has exited.

    A real process is started and waited for, so the pid is one this host really
    used and nothing runs under it now (unless the kernel hands it out again).
    """
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(child.stdout.strip())
    return f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}"


def drain_all(*, rounds: int = 50) -> None:
    """Relay and process everything due now, in this process (seeding only)."""
    owner = f"{socket.gethostname()}:{os.getpid()}:seed"
    for _ in range(rounds):
        report = messaging_drain(owner=owner, budget_seconds=30.0)
        moved = (report.relayed, report.done, report.dead, report.streamed)
        if not any(moved) and not report.retried and not report.duplicates:
            return


def settle(moving: Callable[[], bool], *, deadline_s: float = SETTLE_S) -> bool:
    """Wait while ``moving()`` says work is under way; return True if it still is."""
    end = time.monotonic() + deadline_s
    while moving():
        if time.monotonic() > end:
            return True
        time.sleep(0.2)
    return False


def deliveries_in_flight(subscriptions: Iterable[str] | None = None) -> bool:
    """Whether a delivery is pending and due, or held by a live claim right now.

    A pending delivery whose retry is far off, or held by a lease the operator has
    to deal with, is not "in flight": the check judges it instead of waiting.
    """
    now = timezone.now()
    pending = Delivery.objects.filter(status=Delivery.Status.PENDING)
    if subscriptions is not None:
        pending = pending.filter(subscription__in=list(subscriptions))
    soon = now + SOON
    due = pending.filter(available_at__lte=soon).filter(
        Q(leased_until__isnull=True) | Q(leased_until__lte=soon)
    )
    if due.exists():
        return True
    # A worker that claimed the batch a moment ago holds it for its whole lease: it
    # is in flight while that worker runs. A holder shown dead is the operator's.
    holders = (
        pending.filter(leased_until__gt=soon)
        .exclude(lease_owner="")
        .values_list("lease_owner", flat=True)
        .distinct()
    )
    return any(not holder_state(owner).dead for owner in holders)
