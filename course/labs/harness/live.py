"""The shared harness of the live labs: real worker processes, probes and waiting.

A live part asks the running system a lesson's question. It needs:

- a run id, so its rows, crash tokens, rq keys and counters are its own;
- real worker processes (``manage.py rqworker messaging``, and for the rq modes a
  worker that also serves the run's private queue), stopped however the part ends;
- a sweeper calling ``messaging.tasks.sweep`` every 0.3 s from the lab's process,
  so expired leases and finished backoffs are picked up without the scheduler;
- ``lab_probe`` messages written through the real outbox (``publish_probes``);
- waits that end with a one-line ``LabError`` instead of hanging.

Workers of the installation (``make run``) may claim probe deliveries too. Nothing
here counts per worker: counts come from the delivery rows, the effect rows and the
run's own Redis counters, so they come out the same whoever does the work.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import django_rq
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from redis import Redis
from rq import Queue, Retry, Worker
from rq.job import Job, JobStatus

from config.processes import (
    WaitTimeout,
    child_environment,
    start_manage,
    stop_all,
)
from config.processes import wait_until as process_wait_until
from course.instruments.probes import LAB_PROBE, crash_token
from course.labs.harness.base import LabError, Progress
from course.labs.harness.live_jobs import COUNTER_PREFIX
from course.models import ProbeEffect
from messaging.models import Delivery
from messaging.services import outbox_publish
from messaging.tasks import sweep

log = logging.getLogger("course.live")

# Progress labels of a live part start with this, so the page's runner can tell the
# live steps from the model's (course.services).
LIVE_PREFIX = "live: "
PROBE_SUBSCRIPTION = "lab_probe"
WORKERS = 2
SWEEP_EVERY_S = 0.3
POLL_S = 0.05
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
ORPHAN_IDLE_S = 120
# Private rq queues of a run: labchild's worker serves any queue with this prefix.
PRIVATE_QUEUE_PREFIX = "lab-live-"


def new_run_id() -> str:
    """Return a short id naming one live run's rows, files and keys."""
    return uuid.uuid4().hex[:10]


def live_step(progress: Progress, fraction: float, label: str) -> None:
    """Report a live step (the label gets the live prefix)."""
    progress(fraction, f"{LIVE_PREFIX}{label}")


def redis_connection() -> Redis:
    connection_: Redis = django_rq.get_connection("messaging")
    return connection_


# --- worker processes ---------------------------------------------------------------


@dataclass
class LiveSystem:
    """What a live part runs against: its run id, its workers, its private queue."""

    run: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    worker_names: list[str] = field(default_factory=list)
    private_queue: Queue | None = None

    def check_workers(self) -> None:
        """Raise LabError when one of this run's worker processes has exited."""
        for process, name in zip(self.processes, self.worker_names, strict=True):
            code = process.poll()
            if code is not None:
                raise LabError(
                    f"live: worker {name} exited with status {code}; "
                    "run one by hand to see why: manage.py rqworker messaging"
                )

    def enqueue(
        self,
        function: Callable[..., Any],
        *args: Any,
        job_id: str,
        retry: Retry | None = None,
    ) -> Job:
        """Enqueue ``function`` on the run's private queue (only its workers)."""
        if self.private_queue is None:
            raise RuntimeError("this live system was started without a private queue")
        return self.private_queue.enqueue(
            function,
            *args,
            job_id=f"{self.private_queue.name}-{job_id}",
            retry=retry,
            result_ttl=600,
            failure_ttl=600,
        )


def _worker_args(
    queues: list[str], name: str, *, simple: bool = False
) -> tuple[str, ...]:
    # If the lab's process is killed outright (SIGKILL, no finally), its workers,
    # in sessions of their own, would live on: they quit once idle this long.
    idle = ("--max-idle-time", str(ORPHAN_IDLE_S))
    if not simple and all(queue in settings.RQ_QUEUES for queue in queues):
        # The lab worker that started this run has run the system checks; here
        # they would import every URL and view again, for each worker started.
        return ("rqworker", *queues, "--name", name, *idle, "--skip-checks")
    # A private queue is not in settings: labchild's worker serves it.
    extra = ("--simple",) if simple else ()
    return ("labchild", "worker", *queues, "--name", name, *idle, *extra)


class _Sweeper(threading.Thread):
    """Call ``messaging.tasks.sweep`` every SWEEP_EVERY_S until stopped."""

    def __init__(self) -> None:
        super().__init__(name="live-lab-sweeper", daemon=True)
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(SWEEP_EVERY_S):
                try:
                    sweep()
                except Exception:  # a failed sweep only delays work; keep sweeping
                    log.warning("live lab sweep failed", exc_info=True)
        finally:
            connection.close()  # this thread's own database connection


@contextlib.contextmanager
def live_system(
    *,
    run: str,
    progress: Progress,
    workers: int = WORKERS,
    private_queue: bool = False,
    messaging: bool = True,
    simple: bool = False,
) -> Iterator[LiveSystem]:
    """Start ``workers`` real rq worker processes and a sweeper; stop all at exit.

    1. Start the workers (messaging, plus the run's private queue when asked).
    2. Wait until each has registered with rq, or raise LabError.
    3. Sweep every 0.3 s while the block runs.
    4. However the block ends: stop the sweeper, SIGTERM then SIGKILL the workers
       (and any work-horse left), delete the private queue's keys and the run's
       probe folders.
    """
    if connection.in_atomic_block:
        # The workers could not see uncommitted probes; the outbox needs a commit.
        raise LabError("live: run the live part outside a database transaction")
    # ``messaging=False``: the workers serve the private queue only (a measurement
    # that other work must not share); ``simple``: jobs run without a fork.
    queues = ["messaging"] if messaging else []
    system = LiveSystem(run=run)
    if private_queue:
        system.private_queue = Queue(
            f"{PRIVATE_QUEUE_PREFIX}{run}", connection=redis_connection()
        )
        queues.append(system.private_queue.name)
    env = child_environment(LOG_LEVEL="WARNING")
    sweeper = _Sweeper()
    try:
        live_step(progress, 0.02, f"starting {workers} rq worker processes")
        for index in range(1, workers + 1):
            name = f"lab-{run}-{index}"
            args = _worker_args(queues, name, simple=simple)
            system.processes.append(start_manage(*args, env=env))
            system.worker_names.append(name)
        _wait_registered(system)
        sweeper.start()
        yield system
    finally:
        if sweeper.is_alive():
            sweeper.stopped.set()
            sweeper.join(timeout=5)
        stop_all(system.processes, grace=STOP_TIMEOUT_S)
        _cleanup(run, system.private_queue)


def _wait_registered(system: LiveSystem) -> None:
    redis = redis_connection()
    keys = [Worker.redis_worker_namespace_prefix + name for name in system.worker_names]
    try:
        process_wait_until(
            lambda: all(redis.exists(key) for key in keys),
            "the rq workers to register",
            timeout=START_TIMEOUT_S,
            interval=0.1,
            alive=system.check_workers,
        )
    except WaitTimeout:
        raise LabError(
            f"live: the rq workers did not start in {START_TIMEOUT_S:g} s "
            "(is Redis reachable? try: manage.py rqworker messaging)"
        ) from None


def _cleanup(run: str, private_queue: Queue | None) -> None:
    with contextlib.suppress(Exception):
        redis = redis_connection()
        if private_queue is not None:
            private_queue.delete(delete_jobs=True)
        # Job hashes, registries and counters of the run all carry its id.
        for key in redis.scan_iter(match=f"*{PRIVATE_QUEUE_PREFIX}{run}*", count=500):
            redis.delete(key)
    probes = Path(settings.VAR_DIR) / "probes"
    for folder in probes.glob(f"{run}*"):
        shutil.rmtree(folder, ignore_errors=True)


# --- probes and counts --------------------------------------------------------------


def publish_probes(
    run: str,
    seqs: Iterable[int],
    *,
    crash_once: Collection[int] = (),
    crash_always: Collection[int] = (),
    fail: Collection[int] = (),
) -> dict[int, int]:
    """Write ``lab_probe`` messages for ``seqs`` in one transaction; return seq → id.

    Crash tokens are created first: the handler looks for its token only when a
    worker runs it, which cannot happen before the commit.
    """
    seqs = list(seqs)
    for seq in crash_once:
        if seq in seqs:
            crash_token(run, seq).touch()
    ids: dict[int, int] = {}
    with transaction.atomic():
        for seq in seqs:
            body: dict[str, Any] = {"run": run, "seq": seq}
            if seq in crash_once:
                body["crash_once"] = True
            if seq in crash_always:
                body["crash_always"] = True
            if seq in fail:
                body["fail"] = True
            message = outbox_publish(type=LAB_PROBE, key=seq, body=body)
            ids[seq] = message.pk
    return ids


def probe_deliveries(message_ids: Iterable[int]) -> Any:
    """Return the ``lab_probe`` deliveries of these messages (a queryset)."""
    return Delivery.objects.filter(
        message_id__in=list(message_ids), subscription=PROBE_SUBSCRIPTION
    )


def delivery_reached(message_id: int, *, attempts: int = 1, done: bool = False) -> bool:
    """Return whether the delivery was claimed ``attempts`` times (and is done)."""
    deliveries = probe_deliveries([message_id]).filter(attempts__gte=attempts)
    if done:
        deliveries = deliveries.filter(status=Delivery.Status.DONE)
    return bool(deliveries.exists())


def deliveries_settled(message_ids: Collection[int]) -> bool:
    """Return whether every message has its delivery and none is pending."""
    deliveries = probe_deliveries(message_ids)
    return (
        deliveries.count() == len(message_ids)
        and not deliveries.filter(status=Delivery.Status.PENDING).exists()
    )


def attempts_total(message_ids: Iterable[int]) -> int:
    """Return the claims counted on these messages' deliveries."""
    total = probe_deliveries(message_ids).aggregate(n=Sum("attempts"))["n"]
    return int(total or 0)


@dataclass(frozen=True)
class EffectCounts:
    effect: int
    distinct: int


def effect_counts(run: str) -> EffectCounts:
    """Return how many effects the run's probes left, and for how many seqs."""
    effects = ProbeEffect.objects.filter(run=run)
    return EffectCounts(
        effect=effects.count(),
        distinct=effects.values("seq").distinct().count(),
    )


def deliveries_counted(run: str, mode: str) -> int:
    """Return the deliveries the rq jobs of ``run`` counted in ``mode``."""
    value = redis_connection().get(f"{COUNTER_PREFIX}{run}:{mode}")
    return int(value or 0)


def rq_jobs_settled(system: LiveSystem, job_ids: Collection[str]) -> bool:
    """Return whether every job finished or failed for good (not queued for a retry)."""
    jobs = Job.fetch_many(list(job_ids), connection=redis_connection())
    if any(job is None for job in jobs):
        return False
    final = (JobStatus.FINISHED, JobStatus.FAILED)
    return all(job is not None and job.get_status() in final for job in jobs)


def wait_until(
    check: Callable[[], object],
    *,
    what: str,
    timeout: float,
    system: LiveSystem | None = None,
    detail: Callable[[], str] | None = None,
) -> float:
    """Poll ``check`` until it holds; return the seconds waited.

    ``system``'s workers are checked between polls: one that died ends the wait
    with its LabError, and so does ``timeout`` passing first.
    """
    started = time.monotonic()
    try:
        process_wait_until(
            check,
            what,
            timeout=timeout,
            interval=POLL_S,
            alive=system.check_workers if system is not None else None,
        )
    except WaitTimeout:
        extra = f" ({detail()})" if detail is not None else ""
        raise LabError(
            f"live: {what} did not settle in {timeout:g} s{extra}; "
            "are the messaging workers and the database responsive?"
        ) from None
    return time.monotonic() - started
