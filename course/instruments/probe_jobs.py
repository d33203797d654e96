"""rq jobs whose behaviour the supervision tests and the worker-processes lab control.

- ``io_job`` waits like an outbound call (an I/O-bound job) and records when it ran,
  in which process, in a Redis list named by the run: the lab measures the pool's
  duration from those records, not from its own clock.
- ``die_always`` kills the process it runs in (rq's work-horse) with SIGKILL: no
  exception, no cleanup, nothing reported; what happens next is the supervisor's.
- ``die_once`` does so only while its token file exists, removing it first, so the
  retry on a fresh work-horse succeeds.
- ``sleep_then_mark`` takes a while and then writes a file: proof that a job in
  hand was finished (graceful shutdown).
- ``slow_while_token`` hangs while its token file exists, so a cold shutdown cuts it
  off mid-job, and finishes at once on the retry once the test removed the token.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from rq import get_current_job


def _record(run: str, event: dict[str, object]) -> None:
    job = get_current_job()
    if job is None:
        return
    event = {**event, "worker": job.worker_name}
    job.connection.rpush(f"jobprobe:{run}", json.dumps(event))
    job.connection.expire(f"jobprobe:{run}", 3600)


def io_job(run: str, seq: int, ms: int) -> int:
    """Wait ``ms`` milliseconds (an outbound call), then record the job's span."""
    started = time.time()
    time.sleep(ms / 1000)
    _record(run, {"seq": seq, "start": started, "end": time.time(), "pid": os.getpid()})
    return seq


def die_always(run: str, seq: int) -> None:
    """Kill the current process before doing anything."""
    _record(run, {"seq": seq, "died": True, "pid": os.getpid()})
    os.kill(os.getpid(), signal.SIGKILL)


def die_once(token: str) -> str:
    """Kill the current process the first time (while ``token`` exists)."""
    path = Path(token)
    if path.exists():
        path.unlink()
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


def sleep_then_mark(seconds: float, marker: str) -> str:
    """Sleep, then write ``marker``: the file exists only if the job finished."""
    time.sleep(seconds)
    Path(marker).write_text("finished")
    return "finished"


def slow_while_token(token: str, marker: str) -> str:
    """Hang while ``token`` exists (to be cut off); once it is gone, mark and end."""
    deadline = time.monotonic() + 60
    while Path(token).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    Path(marker).write_text("finished")
    return "finished"
