"""Why a run stops at a chunk boundary: cancel request, shutdown, time limit, lease.

A cancel stops at the last checkpoint and marks the row cancelled with its reason; a
lost lease stops without writing anything.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from types import FrameType
from typing import Any

from rq import get_current_job
from rq.worker import Worker

from jobs.models import JobStatus
from library.report.scope import REASON_SHUTDOWN, REASON_TIME_LIMIT, REASON_USER


class ShutdownFlag:
    """SIGTERM sets a flag the run reads at its next chunk boundary.

    rq's work-horse leaves SIGTERM at its default (die at once); a deploy that
    signals the whole service reaches the horse too. The previous handler is
    chained (a SimpleWorker's own warm shutdown) and restored when the run ends.
    Only the main thread may install handlers; elsewhere the flag stays unset.
    """

    def __init__(self) -> None:
        self.set = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.set = True
        if callable(self._previous):
            self._previous(signum, frame)

    def __enter__(self) -> ShutdownFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)


def _worker_shutting_down() -> bool:
    """Return whether the rq worker running this job received a warm shutdown."""
    rq_job = get_current_job()
    name = os.environ.get("RQ_WORKER_ID")
    if rq_job is None or not name:
        return False
    # rq records a warm shutdown (SIGTERM to the worker while busy) in its hash.
    key = Worker.redis_worker_namespace_prefix + name
    return bool(rq_job.connection.hexists(key, "shutdown_requested_date"))


def stop_reason(
    job_id: uuid.UUID,
    owner: str,
    shutdown: ShutdownFlag,
    started: float,
    time_limit_s: float | None,
) -> tuple[str, bool]:
    """Return (reason, keep_lease): why the run must stop now, or ("", True).

    ``keep_lease`` is False when the run no longer owns its row: it must not write.
    """
    row = (
        JobStatus.objects.filter(pk=job_id)
        .values("state", "lease_owner", "cancel_requested_at", "cancel_reason")
        .first()
    )
    if row is None or row["lease_owner"] != owner or row["state"] != "running":
        return "lease lost", False
    if row["cancel_requested_at"] is not None:
        return row["cancel_reason"] or REASON_USER, True
    if shutdown.set or _worker_shutting_down():
        return REASON_SHUTDOWN, True
    if time_limit_s is not None and time.monotonic() - started >= time_limit_s:
        return f"{REASON_TIME_LIMIT} ({time_limit_s:g} s)", True
    return "", True
