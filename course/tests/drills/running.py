"""A drill started for real: its supervisor, sandbox, site and agent, and the
learner's side of it (the one-time sign-in, the check, the stop)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from config.processes import wait_until
from course.drills.catalogue import drill_get
from course.drills.services import drill_check_ask, drill_start, drill_stop
from course.drills.signin import pass_digest
from course.drills.state import Phase
from course.tests.drills.sandbox_admin import SandboxAdmin
from jobs.models import JobStatus

# A sandbox is made, the incident seeded and a daphne started: seconds, not minutes;
# the deadline only ends a hung start.
READY_S = 180.0
VERDICT_S = 180.0


@dataclass
class RunningDrill:
    job: JobStatus
    base: str
    admin: SandboxAdmin

    def row(self) -> JobStatus:
        return JobStatus.objects.get(pk=self.job.pk)

    def result(self) -> dict[str, Any]:
        return dict(self.row().result or {})

    def check(self) -> dict[str, Any]:
        """Ask for a check, as the page's button does; return the verdict.

        A verdict that says work was still moving is asked again, as the page tells
        the learner to (on a loaded host the niced sandbox can take its time).
        """

        def settled() -> dict[str, Any] | None:
            verdict = self._check_once()
            return None if verdict["settling"] else verdict

        return wait_until(settled, "a verdict on settled work", timeout=VERDICT_S * 2)

    def _check_once(self) -> dict[str, Any]:
        assert drill_check_ask(self.job)
        checkpoint = self.row().checkpoint
        assert isinstance(checkpoint, dict)
        asked = checkpoint["check"]

        def answered() -> dict[str, Any] | None:
            result = self.result()
            return result if result.get("check_for") == asked else None

        verdict: dict[str, Any] = wait_until(
            answered, "the drill's verdict", timeout=VERDICT_S
        )["verdict"]
        return verdict

    def closed(self) -> JobStatus:
        def finished() -> JobStatus | None:
            row = self.row()
            return row if row.is_finished else None

        return wait_until(finished, "the drill to close", timeout=READY_S)


def ready(job: JobStatus) -> JobStatus | None:
    row = JobStatus.objects.get(pk=job.pk)
    if row.is_finished:
        raise AssertionError(f"the drill ended: {row.message} {row.error}")
    result = row.result or {}
    if result.get("phase") == Phase.READY and result.get("signin"):
        return row
    return None


@contextmanager
def drill_running(slug: str, user: User) -> Iterator[RunningDrill]:
    """Start the drill ``slug`` for ``user``; sign in to its admin; stop it after."""
    drill = drill_get(slug)
    assert drill is not None
    started = drill_start(drill=drill, user=user)
    try:
        row = wait_until(
            lambda: ready(started.job), f"the drill {slug}", timeout=READY_S
        )
        result = dict(row.result or {})
        assert result["signin"] == pass_digest(started.token)
        base = f"http://127.0.0.1:{result['port']}"
        admin = SandboxAdmin(base)
        try:
            admin.sign_in(f"{base}/course/drills/enter/{started.token}/")
            yield RunningDrill(row, base, admin)
        finally:
            admin.close()
    finally:
        drill_stop(started.job)
        wait_until(
            lambda: JobStatus.objects.get(pk=started.job.pk).is_finished,
            "the drill to close",
            timeout=READY_S,
        )


def failing(verdict: dict[str, Any]) -> list[str]:
    return [f["text"] for f in verdict["findings"] if not f["ok"]]


def eventually(condition: Any, what: str) -> Any:
    """Wait for what a worker of the sandbox does after an admin action."""
    return wait_until(condition, what, timeout=READY_S)
