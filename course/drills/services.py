"""Starting, following, checking and stopping a drill: the web side.

A drill starts processes (a sandbox, its Redis server, a daphne, a worker, the
agent), so it needs a signed-in learner, and goes through the lab service's rules:
the operator's allowance for the account (``course.models.LabAllowance``: the live
right, the live runs an hour), **one open drill per learner**, and at most
``DRILLS_OPEN`` open on the whole site. Nothing is written for a refused drill.

A started drill is a ``JobStatus`` row (``course.drills.state``) and one detached
supervisor process (``course.drills.supervisor``), which does everything slow. The
page's requests only write request fields on the row, under a lock on it.

``drills_expire`` finishes the rows whose supervisor stopped renewing its lease
(killed, or hung: a hung one is killed here, which leaves its sandbox to the sweep)
and those no supervisor ever took.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from config.processes import ROOT, child_environment, manage_command
from course.drills.catalogue import Drill
from course.drills.selectors import (
    drill_open_of,
    drills_open_count,
    drills_started_since,
)
from course.drills.signin import pass_digest
from course.drills.state import DRILL_KIND, drill_result, process_start
from course.drills.supervisor import log_path
from course.sandbox import sandbox_sweep
from course.services.labqueue import Requester, client_digest, requester_limits
from jobs.models import JobStatus
from jobs.services import jobstatus_create

log = logging.getLogger("course.drills")

# A row no supervisor took within this long was never going to be taken.
UNTAKEN_S: Final = 120
FULL_RETRY_S: Final = 60


class DrillRefused(Exception):
    """A drill that may not start now: ``status`` (HTTP) and when to retry."""

    def __init__(
        self, message: str, *, status: int, retry_after_s: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Started:
    job: JobStatus
    token: str  # the one-time sign-in, kept in the learner's session only


def _learner(user: AbstractBaseUser | AnonymousUser) -> User:
    if not (isinstance(user, User) and user.is_authenticated and user.is_active):
        raise DrillRefused("Sign in to start a drill: it starts processes.", status=403)
    return user


def _allowed(user: User, now: datetime.datetime) -> None:
    limits = requester_limits(
        Requester(visitor=f"user:{user.pk}", client=client_digest(""), user=user)
    )
    if not limits.live_allowed:
        raise DrillRefused(
            "An operator has withdrawn this account's right to run live experiments, "
            "and drills are live.",
            status=403,
        )
    started = drills_started_since(user_id=user.pk, since=now - _HOUR)
    if started >= limits.live_per_hour:
        raise DrillRefused(
            f"You have started {started} drills in the last hour, the most one "
            "account may; try again later.",
            status=429,
            retry_after_s=600,
        )
    if drills_open_count() >= settings.DRILLS_OPEN:
        raise DrillRefused(
            f"{settings.DRILLS_OPEN} drills are open on the site, the most it runs at "
            "once; try again in a minute.",
            status=503,
            retry_after_s=FULL_RETRY_S,
        )


_HOUR: Final = datetime.timedelta(hours=1)


def drill_start(
    *, drill: Drill, user: AbstractBaseUser | AnonymousUser, spawn: bool = True
) -> Started:
    """Check the learner's right and quotas, record the drill, start its supervisor.

    Raises ``DrillRefused``. The learner's row is locked while the open drills are
    counted, so two starts at once cannot both pass "one open drill".
    """
    learner = _learner(user)
    drills_expire()
    now = timezone.now()
    token = secrets.token_urlsafe(24)
    with transaction.atomic():
        User.objects.select_for_update().filter(pk=learner.pk).first()
        open_drill = drill_open_of(user_id=learner.pk)
        if open_drill is not None:
            raise DrillRefused(
                f"Your drill “{open_drill.name}” is still open: stop it first (one "
                "drill at a time).",
                status=409,
            )
        _allowed(learner, now)
        job = jobstatus_create(
            kind=DRILL_KIND, name=drill.slug, params={"slug": drill.slug}, user=learner
        )
        JobStatus.objects.filter(pk=job.pk).update(
            message="waiting for its supervisor",
            checkpoint={"touched": time.time(), "pass": pass_digest(token)},
        )
        if spawn:
            transaction.on_commit(lambda: supervisor_spawn(job.id))
    job.refresh_from_db()
    log.info("drill %s (%s) started by %s", job.id, drill.slug, learner.get_username())
    return Started(job, token)


# A supervisor's log (its start-up and any crash) is kept this long.
LOG_KEPT_S: Final = 7 * 24 * 3600


def supervisor_spawn(job_id: uuid.UUID) -> None:
    """Start the drill's supervisor, detached: it outlives this request."""
    path = log_path(job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    _old_logs_remove(path.parent)
    with open(path, "ab") as output:
        process = subprocess.Popen(
            manage_command("drill", "supervise", str(job_id)),
            cwd=ROOT,
            env=child_environment(),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    # Reaped when it ends, so a long-lived server collects no zombies.
    threading.Thread(target=process.wait, daemon=True).start()


def _old_logs_remove(folder: Path) -> None:
    cutoff = time.time() - LOG_KEPT_S
    for old in folder.glob("*.log"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


def _request(job: JobStatus, **changes: Any) -> bool:
    """Merge ``changes`` into the row's requests (checkpoint), under its lock."""
    with transaction.atomic():
        row = (
            JobStatus.objects.select_for_update()
            .filter(pk=job.pk, kind=DRILL_KIND)
            .exclude(state__in=JobStatus.FINISHED)
            .first()
        )
        if row is None:
            return False
        requests = dict(row.checkpoint) if isinstance(row.checkpoint, dict) else {}
        requests.update(changes, touched=time.time())
        JobStatus.objects.filter(pk=row.pk).update(checkpoint=requests)
    return True


def drill_touch(job: JobStatus) -> bool:
    """The learner's page is open: keep the drill from its idle timeout."""
    return _request(job)


def drill_check_ask(job: JobStatus) -> bool:
    """Ask the supervisor to run the checker now; False when the drill is over."""
    return _request(job, check=time.time())


def drill_link_renew(job: JobStatus) -> str | None:
    """Make a new one-time sign-in link (the old one stops working)."""
    token = secrets.token_urlsafe(24)
    return token if _request(job, **{"pass": pass_digest(token)}) else None


def drill_stop(job: JobStatus, *, reason: str = "closed by the learner") -> bool:
    """Ask the supervisor to close the drill; a drill never taken is closed here."""
    now = timezone.now()
    with transaction.atomic():
        stopped = (
            JobStatus.objects.filter(pk=job.pk, kind=DRILL_KIND)
            .exclude(state__in=JobStatus.FINISHED)
            .update(
                cancel_requested_at=now,
                cancel_reason=reason[:100],
                version=F("version") + 1,
            )
        )
        JobStatus.objects.filter(
            pk=job.pk, kind=DRILL_KIND, state=JobStatus.State.QUEUED
        ).update(
            state=JobStatus.State.CANCELLED,
            finished_at=now,
            message=reason[:200],
            version=F("version") + 1,
        )
    return stopped == 1


def drills_expire(now: datetime.datetime | None = None) -> int:
    """Finish the drills whose supervisor is gone; return how many.

    A running drill whose lease ran out lost its supervisor (killed: its sandbox is
    left to ``sandbox_sweep``, run here; hung: it is killed first). A drill still
    queued after ``UNTAKEN_S`` never got one.
    """
    now = now or timezone.now()
    lost = list(
        JobStatus.objects.filter(
            kind=DRILL_KIND, state=JobStatus.State.RUNNING, leased_until__lt=now
        )
    )
    for job in lost:
        _supervisor_kill(drill_result(job).get("supervisor"))
    failed = JobStatus.objects.filter(pk__in=[j.pk for j in lost]).update(
        state=JobStatus.State.FAILED,
        finished_at=now,
        message="the drill's supervisor stopped; start the drill again",
        version=F("version") + 1,
    )
    untaken = JobStatus.objects.filter(
        kind=DRILL_KIND,
        state=JobStatus.State.QUEUED,
        created_at__lt=now - datetime.timedelta(seconds=UNTAKEN_S),
    ).update(
        state=JobStatus.State.FAILED,
        finished_at=now,
        message="the drill never started; start it again",
        version=F("version") + 1,
    )
    if lost:
        sandbox_sweep()
    return failed + untaken


def _supervisor_kill(recorded: object) -> None:
    """Kill a supervisor that stopped renewing but still runs (it is hung)."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("pid"), int):
        return
    pid = int(recorded["pid"])
    if pid == os.getpid() or process_start(pid) != recorded.get("start"):
        return  # gone, or the pid is another process's now
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while process_start(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
