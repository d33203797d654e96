"""The messaging benchmark: the outbox drain beside one rq job per message.

Two measurements, both against real processes:

1. Drain throughput, interleaved ABAB so both sides share the machine's noise:
   OURS publishes N loans (N outbox messages, 5 deliveries each) with no drainer
   running, boots W ``manage.py drainer`` processes (the Procfile's), nudges once and
   times until the last delivery is done. BASELINE enqueues N no-op rq jobs on their
   own queue, boots W workers of the ``rqworker`` command on it (one fork per job) and
   times until the last job has finished. Both clocks start with the processes booted
   and idle, and stop at the completion time they wrote (``done_at``, rq's
   ``ended_at``).
2. What a loan costs, at each of ``--rates`` (default 20/s and 100/s, 30 s each): W
   drainers and ``manage.py scheduler`` run while loans are issued at a steady rate;
   for each loan, notification.created_at and the last delivery's done_at minus
   outbox_message.created_at, how long after the last loan the backlog was empty,
   and the CPU each part of the system used meanwhile (``SystemMeter``): the share
   of the machine, and milliseconds per loan.
"""

from __future__ import annotations

import argparse
import datetime
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    BenchError,
    Children,
    baseline_worker,
    flush_bench_redis,
    format_table,
    machine_busy_s,
    markdown_page,
    median,
    percentile,
    process_tree_cpu_s,
    redis_connection,
    stat_fields,
    utcnow,
    wait_for_workers,
    wait_until,
)
from config.processes import manage_command

NAME = "outbox"
TARGET_RATIO = 8.0
TARGET_EFFECTS_PER_S = 1000.0
TARGET_P99_MS = 150.0  # at the highest rate
TARGET_DRAINED_S = 1.0
TARGET_ACHIEVED = 0.98  # of the offered loans/s
# The most of the machine the system (drainers, scheduler, their PostgreSQL backends,
# Redis) may use while loans arrive at a rate: issue 27's targets.
TARGET_SYSTEM_SHARE = {20.0: 0.10, 100.0: 0.35}
DEFAULT_RATES = (20.0, 100.0)
BASELINE_QUEUE = "bench-baseline"
BRANCHES = 4
BOOKS_PER_BRANCH = 50
MEMBERS = 500
COPIES = 1_000_000  # never runs out, so every loan_issue succeeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("outbox")
    group.add_argument("--loans", type=int, help="N messages per run (default 2000)")
    group.add_argument("--workers", type=int, help="W drainers/workers (default 2)")
    group.add_argument("--repeats", type=int, help="R runs per side (default 3)")
    group.add_argument(
        "--rates",
        type=lambda text: tuple(float(r) for r in text.split(",")),
        help="loans/s of the steady loads, comma-separated (default 20,100)",
    )
    group.add_argument("--duration", type=float, help="seconds per rate (default 30)")
    group.add_argument(
        "--gather-ms",
        type=float,
        help="the drainers' --gather-ms (default: the drainer's own)",
    )
    group.add_argument(
        "--batch-goal",
        type=int,
        help="the drainers' --batch-goal (default: the drainer's own)",
    )
    group.add_argument(
        "--issuers",
        type=int,
        help="threads issuing the steady load (default 4 on PostgreSQL, 1 on SQLite)",
    )


@dataclass(frozen=True)
class Params:
    loans: int
    workers: int
    repeats: int
    rates: tuple[float, ...]
    duration: float
    issuers: int
    gather_ms: float | None = None
    batch_goal: int | None = None

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> Params:
        quick = options.quick
        params = cls(
            loans=options.loans or (200 if quick else 2000),
            workers=options.workers or 2,
            repeats=options.repeats or (1 if quick else 3),
            rates=options.rates or DEFAULT_RATES,
            duration=options.duration or (3.0 if quick else 30.0),
            issuers=options.issuers or _default_issuers(),
            gather_ms=options.gather_ms,
            batch_goal=getattr(options, "batch_goal", None),
        )
        if min(params.loans, params.workers, params.repeats, params.issuers) < 1:
            raise BenchError(
                "--loans, --workers, --repeats and --issuers must be at least 1"
            )
        return params


def _default_issuers() -> int:
    """Several issuing threads where the database takes concurrent writers.

    One thread spends most of a loan waiting on the database's round trips, and
    on these 2 cores it reached about 83 of the 100 loans/s offered: the load,
    not the drain, was what fell short. SQLite takes one writer at a time, so
    more threads there only queue on its lock.
    """
    from django.db import connection

    return 4 if connection.vendor == "postgresql" else 1


@dataclass(frozen=True)
class DrainRun:
    side: str
    repeat: int
    messages: int
    effects: int
    wall_s: float
    # OURS only: how many drain jobs ran, and how many ever ran at the same time.
    drain_jobs: int = 0
    max_parallel_drains: int = 0

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.wall_s

    @property
    def effects_per_s(self) -> float:
        return self.effects / self.wall_s

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "messages_per_s": round(self.messages_per_s, 1),
            "effects_per_s": round(self.effects_per_s, 1),
        }


# --- Data ---------------------------------------------------------------------


def create_library() -> tuple[list[int], list[int]]:
    """Create the benchmark's own branches, books and members; return their ids."""
    from library.models import Book, Branch, Member

    branches = Branch.objects.bulk_create(
        [Branch(name=f"Bench {n}", city="Bench") for n in range(1, BRANCHES + 1)]
    )
    books = Book.objects.bulk_create(
        [
            Book(
                title=f"Bench book {b.pk}-{n}",
                author="Bench",
                branch=b,
                on_shelf=COPIES,
            )
            for b in branches
            for n in range(BOOKS_PER_BRANCH)
        ]
    )
    members = Member.objects.bulk_create(
        [
            Member(
                first_name="Bench",
                last_name=str(n),
                registered_at=datetime.date(2024, 1, 1),
            )
            for n in range(MEMBERS)
        ]
    )
    return [b.pk for b in books], [m.pk for m in members]


def reset_activity() -> None:
    """Delete every loan and message a previous phase left, so each run starts equal."""
    from library.models import Book, BranchStock, Loan, Notification
    from messaging.models import DeadLetter, Delivery, OutboxMessage, ProcessedMessage

    for model in (
        Notification,
        DeadLetter,
        ProcessedMessage,
        Delivery,
        OutboxMessage,
        Loan,
        BranchStock,
    ):
        model.objects.all().delete()
    Book.objects.update(on_shelf=COPIES)


def issue_loans(count: int, books: list[int], members: list[int]) -> None:
    from library.services import loan_issue

    for n in range(count):
        loan_issue(book_id=books[n % len(books)], member_id=members[n % len(members)])


def effects_per_loan() -> int:
    from messaging.registry import MessageType, subscriptions_for

    return len(subscriptions_for(MessageType.LOAN_ISSUED))


# --- Throughput ---------------------------------------------------------------


def drainer_command(params: Params) -> list[str]:
    """Return the command of one drainer, as the Procfile runs it (unsupervised)."""
    gather = () if params.gather_ms is None else ("--gather-ms", f"{params.gather_ms}")
    goal = () if params.batch_goal is None else ("--batch-goal", f"{params.batch_goal}")
    return manage_command("drainer", *gather, *goal, "--verbosity", "0")


def start_drainers(children: Children, names: list[str], params: Params) -> None:
    """Start a drainer per name; return once every one has announced itself.

    A drainer that exits or stays silent is reported with its exit status and the
    end of its log, not just a timeout.
    """
    from messaging.dispatch import DRAINERS_KEY

    for name in names:
        children.start(name, drainer_command(params))
    connection = redis_connection()
    try:
        wait_until(
            lambda: connection.zcount(DRAINERS_KEY, time.time(), "+inf") >= len(names),
            timeout=90.0,
            what=f"{len(names)} drainers announced",
            children=children,
        )
    except BenchError as error:
        raise BenchError(f"{error}\n{children_report(children, names)}") from None


def children_report(children: Children, names: list[str]) -> str:
    """Each named child's state (running, or its exit status) and its log's end."""
    lines = []
    for name in names:
        process = children.processes.get(name)
        state = "gone" if process is None else process.poll()
        status = "running" if state is None else f"exited with {state}"
        try:
            tail = children.log_text(name)[-1500:] or "(empty log)"
        except OSError as error:
            tail = f"(no log: {error})"
        lines.append(f"--- {name}: {status}; its log:\n{tail}")
    return "\n".join(lines)


def drain_ours(
    *, children: Children, params: Params, repeat: int, ids: tuple[list[int], list[int]]
) -> DrainRun:
    """Publish N loans with no drainer, then time W drainers draining them."""
    from django.db.models import Max

    from messaging.dispatch import nudge_drain
    from messaging.models import Delivery

    reset_activity()
    flush_bench_redis()
    issue_loans(params.loans, *ids)
    # Each commit nudged (an rq job, since no drainer was alive): drop those, so the
    # run starts from the single nudge below with every drainer idle.
    flush_bench_redis()
    names = [f"ours-{repeat}-{w}" for w in range(params.workers)]
    start_drainers(children, names, params)
    expected = params.loans * effects_per_loan()
    started = utcnow()
    nudge_drain()
    wait_until(
        lambda: (
            Delivery.objects.filter(status=Delivery.Status.DONE).count() >= expected
        ),
        timeout=max(120.0, params.loans * 0.2),
        what=f"{expected} deliveries done",
        children=children,
        interval=0.1,
    )
    finished = Delivery.objects.aggregate(end=Max("done_at"))["end"]
    for name in names:
        children.stop(name)
    not_done = Delivery.objects.exclude(status=Delivery.Status.DONE).count()
    if not_done:
        raise BenchError(f"{not_done} deliveries ended up not done (dead letters?)")
    jobs, parallel = _drain_concurrency()
    return DrainRun(
        side="ours",
        repeat=repeat,
        messages=params.loans,
        effects=expected,
        wall_s=(finished - started).total_seconds(),
        drain_jobs=jobs,
        max_parallel_drains=parallel,
    )


def _drain_concurrency() -> tuple[int, int]:
    """Return how many drains did the work and the most that overlapped.

    A drain's lease owner is unique per drainer wake-up (per rq job under rq); its
    span is from its first claim's work to its last ``done_at`` (approximated by the
    done times it wrote).
    """
    from django.db.models import Max, Min

    from messaging.models import Delivery

    spans = list(
        Delivery.objects.values("lease_owner").annotate(
            first=Min("done_at"), last=Max("done_at")
        )
    )
    events = sorted(
        [(s["first"], 1) for s in spans] + [(s["last"], -1) for s in spans],
        key=lambda e: (e[0], -e[1]),
    )
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return len(spans), most


def drain_baseline(*, children: Children, params: Params, repeat: int) -> DrainRun:
    """Enqueue N no-op jobs on a queue of their own; time W workers running them."""
    from rq import Queue
    from rq.job import Job

    flush_bench_redis()
    connection = redis_connection()
    names = [f"baseline-{repeat}-{w}" for w in range(params.workers)]
    for name in names:
        children.start(name, baseline_worker(BASELINE_QUEUE))
    wait_for_workers(BASELINE_QUEUE, params.workers, children)
    queue = Queue(BASELINE_QUEUE, connection=connection)
    datas = [Queue.prepare_data("bench.common.noop") for _ in range(params.loans)]
    # One MULTI/EXEC: the workers see all N jobs at the same instant, as the drain
    # sees all N outbox rows at once.
    with connection.pipeline() as pipe:
        jobs = queue.enqueue_many(datas, pipeline=pipe)
        pipe.execute()
    started = utcnow()
    finished_registry = queue.finished_job_registry
    failed_registry = queue.failed_job_registry
    wait_until(
        lambda: finished_registry.count + failed_registry.count >= params.loans,
        timeout=max(120.0, params.loans * 0.2),
        what=f"{params.loans} baseline jobs finished",
        children=children,
        interval=0.02,
    )
    failed = failed_registry.count
    ids = [job.id for job in jobs]
    ended = [
        job.ended_at
        for job in Job.fetch_many(ids, connection=connection)
        if job is not None and job.ended_at is not None
    ]
    for name in names:
        children.stop(name)
    if failed or len(ended) != params.loans:
        raise BenchError(f"baseline: {failed} jobs failed, {len(ended)} ended")
    finished = max(ended).replace(tzinfo=datetime.UTC)
    return DrainRun(
        side="baseline",
        repeat=repeat,
        messages=params.loans,
        effects=params.loans,
        wall_s=(finished - started).total_seconds(),
    )


# --- What a loan costs ------------------------------------------------------------


def _postgres_backends(database: str) -> dict[int, float]:
    """CPU seconds of each living PostgreSQL backend connected to ``database``.

    A backend's title (``postgres: … <user> <database> <client> <state>``) names its
    database, so another database's work on a shared machine is not counted.
    """
    found = {}
    marker = f" {database} ".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(entry.name)
        if fields is None or fields[0] != "postgres":
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker in title:
            found[int(entry.name)] = process_tree_cpu_s(int(entry.name), children=False)
    return found


def _redis_cpu_s() -> float:
    """CPU seconds the Redis server has used (its INFO; the benchmark's own server)."""
    info = redis_connection().info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@dataclass
class SystemMeter:
    """Where the CPU went while a load was issued, split by part of the system.

    ``workers`` and ``scheduler`` are process trees (reaped children included);
    PostgreSQL is the backends of the benchmark's database, split between those
    serving the issuer (the loans' own transactions, ``issuer_backends``) and the
    rest (the effects); Redis is the server's own account. Backends come and go
    (the scheduler reconnects every pass), so they are sampled every
    ``interval`` seconds and each one's last sample kept: a backend that exits
    loses at most its last interval.
    """

    pids: dict[str, list[int]]
    database: str
    issuer_backends: set[int] = field(default_factory=set)
    interval: float = 0.2
    _first: dict[int, float] = field(default_factory=dict)
    _last: dict[int, float] = field(default_factory=dict)
    _before: dict[str, float] = field(default_factory=dict)
    _began: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _trees(self) -> dict[str, float]:
        from config.processes import descendants

        sample = {"issuer": process_tree_cpu_s(os.getpid(), children=False)}
        for name, pids in self.pids.items():
            living = [child for pid in pids for child in descendants(pid)]
            sample[name] = sum(
                process_tree_cpu_s(pid, children=True) for pid in pids
            ) + sum(process_tree_cpu_s(pid, children=False) for pid in living)
        sample["Redis"] = _redis_cpu_s()
        sample["machine"] = machine_busy_s()
        return sample

    def _sample_backends(self) -> None:
        for pid, cpu in _postgres_backends(self.database).items():
            self._first.setdefault(pid, 0.0)  # born during the load: all its CPU
            self._last[pid] = cpu

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample_backends()

    def start(self) -> None:
        # Backends living now count from their CPU now; later ones from zero.
        for pid, cpu in _postgres_backends(self.database).items():
            self._first[pid] = cpu
            self._last[pid] = cpu
        self._before, self._began = self._trees(), time.monotonic()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        """Return CPU seconds per part, ``other``, ``machine`` and ``capacity``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample_backends()
        after, wall = self._trees(), time.monotonic() - self._began
        used = {name: after[name] - self._before[name] for name in after}
        issuer_pg = sum(
            self._last[p] - self._first[p]
            for p in self._last
            if p in self.issuer_backends
        )
        effects_pg = sum(
            self._last[p] - self._first[p]
            for p in self._last
            if p not in self.issuer_backends
        )
        used["PostgreSQL (effects)"] = effects_pg
        used["PostgreSQL (issuer)"] = issuer_pg
        parts = sum(v for name, v in used.items() if name != "machine")
        used["other"] = max(0.0, used["machine"] - parts)
        used["capacity"] = wall * (os.cpu_count() or 1)
        return {name: round(value, 3) for name, value in used.items()}


# The parts that make up "the system" a loan's effects cost (the issuer apart).
SYSTEM_PARTS = ("workers", "scheduler", "PostgreSQL (effects)", "Redis")


@dataclass(frozen=True)
class LatencyResult:
    loans: int
    offered_rate: float
    duration_s: float
    achieved_rate: float
    notification_ms: dict[str, float]
    all_effects_ms: dict[str, float]
    # From the last loan's commit to the last delivery's done_at: how long the
    # backlog took to reach 0 after the load stopped (0 when it never built up).
    drained_after_s: float | None
    missing_effects: int
    missing_notifications: int
    # CPU seconds while the load was issued, per part (SystemMeter).
    cpu_s: dict[str, float]
    # The system's share of the machine (SYSTEM_PARTS / capacity), and CPU
    # milliseconds per loan of the drainers and of the system.
    system_share: float
    worker_ms_per_loan: float
    system_ms_per_loan: float
    # How many drains (wake-ups that did work) and passes the load took.
    drains: int


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 1),
        "p90": round(percentile(values, 90), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values), 1) if values else float("nan"),
    }


def latency(
    *,
    children: Children,
    params: Params,
    rate: float,
    ids: tuple[list[int], list[int]],
) -> LatencyResult:
    """Issue loans at ``rate`` with the drainers and the scheduler running."""
    from django.conf import settings
    from django.db.models import Max

    from library.models import Notification
    from library.services import loan_issue
    from messaging.models import Delivery, OutboxMessage

    reset_activity()
    flush_bench_redis()
    tag = f"{rate:g}"
    names = [f"latency-{tag}-drainer-{w}" for w in range(params.workers)]
    scheduler = f"latency-{tag}-scheduler"
    children.start(scheduler, manage_command("scheduler"))
    start_drainers(children, names, params)
    count = max(1, round(rate * params.duration))
    meter = SystemMeter(
        {
            "workers": [children.processes[name].pid for name in names],
            "scheduler": [children.processes[scheduler].pid],
        },
        database=str(settings.DATABASES["default"]["NAME"]),
    )
    meter.start()
    elapsed = issue_steadily(count, rate, params, ids, loan_issue, meter)
    cpu_s = meter.stop()
    load_stopped = utcnow()
    expected = count * effects_per_loan()
    # Not required: effects still missing after a minute are the result, not an error.
    wait_until(
        lambda: (
            Delivery.objects.filter(status=Delivery.Status.DONE).count() >= expected
        ),
        timeout=60.0,
        what="every effect of the steady load",
        children=children,
        interval=0.1,
        required=False,
    )
    for name in [*names, scheduler]:
        children.stop(name)
    created = dict(OutboxMessage.objects.values_list("id", "created_at"))
    notified = list(Notification.objects.values_list("source_message_id", "created_at"))
    notification_ms = [
        (at - created[source]).total_seconds() * 1000 for source, at in notified
    ]
    done = list(
        Delivery.objects.filter(status=Delivery.Status.DONE)
        .values("message_id")
        .annotate(last=Max("done_at"))
    )
    all_ms = [
        (row["last"] - created[row["message_id"]]).total_seconds() * 1000
        for row in done
    ]
    done_count = Delivery.objects.filter(status=Delivery.Status.DONE).count()
    last_done = Delivery.objects.aggregate(end=Max("done_at"))["end"]
    drained = (last_done - load_stopped).total_seconds() if last_done else 0.0
    missing = expected - done_count
    system = sum(cpu_s[part] for part in SYSTEM_PARTS)
    return LatencyResult(
        loans=count,
        offered_rate=rate,
        duration_s=params.duration,
        achieved_rate=round(count / elapsed, 1),
        notification_ms=_summary(notification_ms),
        all_effects_ms=_summary(all_ms),
        # Never drained: no time to report (the missing effects say how far off).
        drained_after_s=round(max(0.0, drained), 3) if not missing else None,
        missing_effects=missing,
        missing_notifications=count - len(notified),
        cpu_s=cpu_s,
        system_share=round(system / cpu_s["capacity"], 4),
        worker_ms_per_loan=round(cpu_s["workers"] * 1000 / count, 2),
        system_ms_per_loan=round(system * 1000 / count, 2),
        drains=_drain_concurrency()[0],
    )


def issue_steadily(
    count: int,
    rate: float,
    params: Params,
    ids: tuple[list[int], list[int]],
    loan_issue: Callable[..., object],
    meter: SystemMeter,
) -> float:
    """Issue ``count`` loans at ``rate`` from ``params.issuers`` threads.

    Loan n is due at start + n / rate, whichever thread takes it: an absolute
    schedule, so a slow issue is caught up, not carried forward. Each thread names
    its PostgreSQL backend to ``meter`` (the loans' own cost, reported apart).
    Returns the seconds from the first due time to the last loan's commit.
    """
    from django.db import connection

    books, members = ids
    numbers = iter(range(count))
    take = threading.Lock()
    errors: list[BaseException] = []

    def name_backend() -> None:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                meter.issuer_backends.add(cursor.fetchone()[0])

    name_backend()  # this thread's, which polls for the effects afterwards
    began = time.monotonic()

    def issuer() -> None:
        try:
            name_backend()
            while True:
                with take:
                    n = next(numbers, None)
                if n is None or errors:
                    return
                delay = began + n / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                loan_issue(
                    book_id=books[n % len(books)], member_id=members[n % len(members)]
                )
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            connection.close()  # each thread's own

    threads = [threading.Thread(target=issuer) for _ in range(params.issuers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise BenchError(f"issuing the steady load failed: {errors[0]!r}")
    return time.monotonic() - began


# --- The benchmark ------------------------------------------------------------


def run(children: Children, options: argparse.Namespace) -> dict[str, Any]:
    """Run both measurements; print the tables; return the results document."""
    params = Params.from_options(options)
    ids = create_library()
    runs: list[DrainRun] = []
    for repeat in range(1, params.repeats + 1):
        # ABAB: each pair shares whatever the machine is doing at that moment.
        for side in ("ours", "baseline"):
            print(f"  throughput run {repeat}/{params.repeats}: {side} ...", flush=True)
            if side == "ours":
                run_ = drain_ours(
                    children=children, params=params, repeat=repeat, ids=ids
                )
            else:
                run_ = drain_baseline(children=children, params=params, repeat=repeat)
            detail = (
                f", {run_.drain_jobs} drains, at most"
                f" {run_.max_parallel_drains} at once"
                if side == "ours"
                else ""
            )
            print(
                f"    {run_.wall_s:.2f} s, {run_.messages_per_s:,.0f} messages/s"
                + detail,
                flush=True,
            )
            runs.append(run_)
    loads = []
    for rate in params.rates:
        print(f"  a steady load of {rate:g} loans/s ...", flush=True)
        loads.append(
            asdict(latency(children=children, params=params, rate=rate, ids=ids))
        )
        print(f"    {cost_line(loads[-1])}", flush=True)

    ours = [r for r in runs if r.side == "ours"]
    base = [r for r in runs if r.side == "baseline"]
    ratio = median([r.messages_per_s for r in ours]) / median(
        [r.messages_per_s for r in base]
    )
    pair_ratios = [
        round(a.messages_per_s / b.messages_per_s, 2)
        for a, b in zip(ours, base, strict=True)
    ]
    throughput = {
        side: {
            "median_wall_s": round(median([r.wall_s for r in side_runs]), 3),
            "median_messages_per_s": round(
                median([r.messages_per_s for r in side_runs]), 1
            ),
            "median_effects_per_s": round(
                median([r.effects_per_s for r in side_runs]), 1
            ),
            "runs": [r.as_dict() for r in side_runs],
        }
        for side, side_runs in (("ours", ours), ("baseline", base))
    }
    effects_per_s = median([r.effects_per_s for r in ours])
    result = {
        "params": asdict(params),
        "max_parallel_drains": max(r.max_parallel_drains for r in ours),
        "throughput": throughput,
        "ratio_messages_per_s": round(ratio, 2),
        "pair_ratios": pair_ratios,
        "target_ratio": TARGET_RATIO,
        "target_met": ratio >= TARGET_RATIO,
        "targets": targets(ratio, effects_per_s, loads),
        "loads": loads,
    }
    print()
    print(text_report(result))
    return result


def targets(
    ratio: float, effects_per_s: float, loads: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Issue 27's targets, each with whether this run met it."""
    found: dict[str, dict[str, Any]] = {
        "messages_per_s_ratio": {"target": TARGET_RATIO, "met": ratio >= TARGET_RATIO},
        "effects_per_s": {
            "target": TARGET_EFFECTS_PER_S,
            "met": effects_per_s >= TARGET_EFFECTS_PER_S,
        },
    }
    top = max(loads, key=lambda load: load["offered_rate"])
    found[f"all_effects_p99_ms_at_{top['offered_rate']:g}"] = {
        "target": TARGET_P99_MS,
        "met": top["all_effects_ms"]["p99"] <= TARGET_P99_MS,
    }
    for load in loads:
        rate = load["offered_rate"]
        share = TARGET_SYSTEM_SHARE.get(rate)
        if share is not None:
            found[f"system_share_at_{rate:g}"] = {
                "target": share,
                "met": load["system_share"] <= share,
            }
        drained = load["drained_after_s"]
        found[f"drained_after_s_at_{rate:g}"] = {
            "target": TARGET_DRAINED_S,
            "met": drained is not None and drained <= TARGET_DRAINED_S,
        }
        # The latency targets hold for the offered load only if it was delivered.
        found[f"achieved_rate_at_{rate:g}"] = {
            "target": round(TARGET_ACHIEVED * rate, 1),
            "met": load["achieved_rate"] >= TARGET_ACHIEVED * rate,
        }
    return found


def cost_line(load: dict[str, Any]) -> str:
    return (
        f"system {load['system_share']:.1%} of the machine,"
        f" {load['system_ms_per_loan']:.1f} ms CPU per loan"
        f" (drainers {load['worker_ms_per_loan']:.1f} ms);"
        f" commit -> all effects p50 {load['all_effects_ms']['p50']:g} ms,"
        f" p99 {load['all_effects_ms']['p99']:g} ms"
    )


def text_report(result: dict[str, Any]) -> str:
    t = result["throughput"]
    p = result["params"]
    # From the recorded run, not the registry: a report regenerated later must not
    # take the subscriptions of today's code for those that were measured.
    first = t["ours"]["runs"][0]
    per_message = first["effects"] // first["messages"]
    rows = [
        [
            f"ours: {p['workers']} drainers ({per_message} effects/msg)",
            t["ours"]["median_wall_s"],
            t["ours"]["median_messages_per_s"],
            t["ours"]["median_effects_per_s"],
        ],
        [
            "baseline: 1 no-op rq job/msg",
            t["baseline"]["median_wall_s"],
            t["baseline"]["median_messages_per_s"],
            t["baseline"]["median_effects_per_s"],
        ],
    ]
    met = "met" if result["target_met"] else "NOT met"
    verdicts = ", ".join(
        f"{name} {'met' if t['met'] else 'NOT met'} ({t['target']:g})"
        for name, t in result["targets"].items()
    )
    lines = [
        f"Drain throughput: N={p['loans']} messages, W={p['workers']},"
        f" median of {p['repeats']} interleaved runs",
        format_table(["side", "wall s", "messages/s", "effects/s"], rows),
        f"ratio ours/baseline (messages/s): {result['ratio_messages_per_s']:.2f}x"
        f"  (per pair: {', '.join(f'{r:.2f}' for r in result['pair_ratios'])});"
        f" target >= {result['target_ratio']}x {met}",
        "drains running at once (ours, most seen):"
        f" {result['max_parallel_drains']} of {p['workers']} drainers",
    ]
    for load in result["loads"]:
        lines += ["", *load_report(load, p, per_message)]
    lines += ["", f"targets: {verdicts}"]
    return "\n".join(lines)


def load_report(load: dict[str, Any], p: dict[str, Any], per_message: int) -> list[str]:
    latency_rows = [
        ["commit -> notification", *load["notification_ms"].values()],
        [f"commit -> all {per_message} effects", *load["all_effects_ms"].values()],
    ]
    drained = load["drained_after_s"]
    gather = "" if p.get("gather_ms") is None else f", --gather-ms {p['gather_ms']:g}"
    if p.get("batch_goal") is not None:
        gather += f", --batch-goal {p['batch_goal']}"
    return [
        f"A steady load: {load['loans']} loans offered at {load['offered_rate']:g}/s"
        f" for {load['duration_s']:g} s (achieved {load['achieved_rate']:g}/s from"
        f" {_issuing(p.get('issuers', 1))}), {p['workers']} drainers{gather}"
        f" + scheduler; {load['drains']} drains",
        format_table(["ms", "p50", "p90", "p99", "max"], latency_rows),
        "backlog empty after the load stopped: "
        + ("never (see missing effects)" if drained is None else f"{drained:g} s"),
        f"missing effects at the end: {load['missing_effects']}"
        f" (notifications: {load['missing_notifications']})",
        *cpu_lines(load["cpu_s"], load["loans"]),
        f"the system (drainers, scheduler, PostgreSQL for the effects, Redis):"
        f" {load['system_share']:.1%} of the machine,"
        f" {load['system_ms_per_loan']:.2f} ms CPU per loan;"
        f" drainers {load['worker_ms_per_loan']:.2f} ms per loan",
    ]


def _issuing(threads: int) -> str:
    return "1 issuing thread" if threads == 1 else f"{threads} issuing threads"


def cpu_lines(cpu_s: dict[str, float], loans: int) -> list[str]:
    """Where the CPU went while the load was issued, per part and per loan."""
    capacity = cpu_s["capacity"]
    parts = [name for name in cpu_s if name not in ("machine", "capacity")]
    shares = ", ".join(
        f"{name} {cpu_s[name]:.2f} s ({cpu_s[name] / capacity:.1%},"
        f" {cpu_s[name] * 1000 / loans:.2f} ms/loan)"
        for name in parts
    )
    return [
        f"CPU while issuing: {cpu_s['machine']:.1f} of {capacity:.1f} core-seconds"
        f" busy on the machine ({cpu_s['machine'] / capacity:.0%}, other tenants"
        f" included): {shares}"
    ]


def markdown_report(document: dict[str, Any]) -> str:
    return markdown_page(
        document,
        title="Messaging benchmark (outbox)",
        report=text_report(document["results"][NAME]),
        note="Ratios are medians of runs interleaved with the baseline on the same"
        " machine; compare ratios, not absolute times. 'other' is the rest of a"
        " shared machine (other tenants included), not part of the system"
        " (see bench/README.md).",
    )
