"""The messaging benchmark: the outbox drain beside one rq job per message.

Two measurements, both against real processes:

1. Drain throughput, interleaved ABAB so both sides share the machine's noise:
   OURS publishes N loans (N outbox messages, 3 deliveries each) with no worker
   running, boots W ``manage.py rqworker messaging`` processes, nudges once and times
   until the last delivery is done. BASELINE enqueues N no-op rq jobs on their own
   queue, boots W workers of the same ``rqworker`` command on it and times until the
   last job has finished. Both clocks start with workers booted and idle, and stop at
   the completion time the workers wrote (``done_at``, rq's ``ended_at``).
2. Commit-to-effect latency: W workers and ``manage.py scheduler`` run while loans are
   issued at a steady rate (default 100/s for 30 s); for each loan,
   notification.created_at and the last delivery's done_at minus
   outbox_message.created_at, and how long after the last loan the backlog (every
   delivery of the load) was empty.
"""

from __future__ import annotations

import argparse
import datetime
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from bench.common import (
    BenchError,
    Children,
    CpuMeter,
    baseline_worker,
    flush_bench_redis,
    format_table,
    markdown_page,
    median,
    percentile,
    redis_connection,
    utcnow,
    wait_for_workers,
    wait_until,
)
from config.processes import manage_command

NAME = "outbox"
TARGET_RATIO = 2.0
TARGET_EFFECTS_PER_S = 1000.0
TARGET_P99_MS = 250.0
TARGET_DRAINED_S = 1.0
TARGET_ACHIEVED = 0.98  # of the offered loans/s
BASELINE_QUEUE = "bench-baseline"
BRANCHES = 4
BOOKS_PER_BRANCH = 50
MEMBERS = 500
COPIES = 1_000_000  # never runs out, so every loan_issue succeeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("outbox")
    group.add_argument("--loans", type=int, help="N messages per run (default 2000)")
    group.add_argument("--workers", type=int, help="W worker processes (default 2)")
    group.add_argument("--repeats", type=int, help="R runs per side (default 3)")
    group.add_argument("--rate", type=float, help="loans/s for latency (default 100)")
    group.add_argument("--duration", type=float, help="latency seconds (default 30)")
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
    rate: float
    duration: float
    issuers: int

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> Params:
        quick = options.quick
        params = cls(
            loans=options.loans or (200 if quick else 2000),
            workers=options.workers or 2,
            repeats=options.repeats or (1 if quick else 3),
            rate=options.rate or 100.0,
            duration=options.duration or (3.0 if quick else 30.0),
            issuers=options.issuers or _default_issuers(),
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


def drain_ours(
    *, children: Children, params: Params, repeat: int, ids: tuple[list[int], list[int]]
) -> DrainRun:
    """Publish N loans with no worker, then time W workers draining them."""
    from django.db.models import Max

    from messaging.dispatch import nudge_drain
    from messaging.models import Delivery

    reset_activity()
    flush_bench_redis()
    issue_loans(params.loans, *ids)
    # Each commit nudged into a queue nobody listens to: drop those drain jobs, so
    # the run starts from the single nudge below with every worker idle.
    flush_bench_redis()
    names = [f"ours-{repeat}-{w}" for w in range(params.workers)]
    for name in names:
        children.start(
            name, manage_command("rqworker", "messaging", "--verbosity", "0")
        )
    wait_for_workers("messaging", params.workers, children)
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
    """Return how many drain jobs did the work and the most that overlapped.

    A drain job's lease owner is unique per job; its span is from its first claim's
    work to its last ``done_at`` (approximated by the done times it wrote).
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


# --- Latency ------------------------------------------------------------------


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
    # CPU seconds while the load was issued, per part (bench.common.CpuMeter).
    cpu_s: dict[str, float]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 1),
        "p90": round(percentile(values, 90), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values), 1) if values else float("nan"),
    }


def latency(
    *, children: Children, params: Params, ids: tuple[list[int], list[int]]
) -> LatencyResult:
    """Issue loans at a steady rate with workers and the scheduler running."""
    from django.db.models import Max

    from library.models import Notification
    from library.services import loan_issue
    from messaging.models import Delivery, OutboxMessage

    reset_activity()
    flush_bench_redis()
    names = [f"latency-worker-{w}" for w in range(params.workers)]
    for name in names:
        children.start(
            name, manage_command("rqworker", "messaging", "--verbosity", "0")
        )
    children.start("latency-scheduler", manage_command("scheduler"))
    wait_for_workers("messaging", params.workers, children)
    count = max(1, round(params.rate * params.duration))
    meter = CpuMeter(
        {
            "workers": [children.processes[name].pid for name in names],
            "scheduler": [children.processes["latency-scheduler"].pid],
        }
    )
    meter.start()
    elapsed = issue_steadily(count, params, ids, loan_issue)
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
    for name in [*names, "latency-scheduler"]:
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
    return LatencyResult(
        loans=count,
        offered_rate=params.rate,
        duration_s=params.duration,
        achieved_rate=round(count / elapsed, 1),
        notification_ms=_summary(notification_ms),
        all_effects_ms=_summary(all_ms),
        # Never drained: no time to report (the missing effects say how far off).
        drained_after_s=round(max(0.0, drained), 3) if not missing else None,
        missing_effects=missing,
        missing_notifications=count - len(notified),
        cpu_s=cpu_s,
    )


def issue_steadily(
    count: int,
    params: Params,
    ids: tuple[list[int], list[int]],
    loan_issue: Callable[..., object],
) -> float:
    """Issue ``count`` loans at ``params.rate`` from ``params.issuers`` threads.

    Loan n is due at start + n / rate, whichever thread takes it: an absolute
    schedule, so a slow issue is caught up, not carried forward. Returns the
    seconds from the first due time to the last loan's commit.
    """
    from django.db import connection

    books, members = ids
    numbers = iter(range(count))
    take = threading.Lock()
    errors: list[BaseException] = []
    began = time.monotonic()

    def issuer() -> None:
        try:
            while True:
                with take:
                    n = next(numbers, None)
                if n is None or errors:
                    return
                delay = began + n / params.rate - time.monotonic()
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
                f", {run_.drain_jobs} drain jobs, at most"
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
    print("  latency under steady load ...", flush=True)
    steady = latency(children=children, params=params, ids=ids)

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
    lat = asdict(steady)
    effects_per_s = median([r.effects_per_s for r in ours])
    drained = lat["drained_after_s"]
    targets = {
        "messages_per_s_ratio": {"target": TARGET_RATIO, "met": ratio >= TARGET_RATIO},
        "effects_per_s": {
            "target": TARGET_EFFECTS_PER_S,
            "met": effects_per_s >= TARGET_EFFECTS_PER_S,
        },
        "all_effects_p99_ms": {
            "target": TARGET_P99_MS,
            "met": lat["all_effects_ms"]["p99"] <= TARGET_P99_MS,
        },
        "drained_after_s": {
            "target": TARGET_DRAINED_S,
            "met": drained is not None and drained <= TARGET_DRAINED_S,
        },
        # The latency targets hold for the offered load only if it was delivered.
        "achieved_rate": {
            "target": round(TARGET_ACHIEVED * params.rate, 1),
            "met": lat["achieved_rate"] >= TARGET_ACHIEVED * params.rate,
        },
    }
    result = {
        "params": asdict(params),
        "max_parallel_drains": max(r.max_parallel_drains for r in ours),
        "throughput": throughput,
        "ratio_messages_per_s": round(ratio, 2),
        "pair_ratios": pair_ratios,
        "target_ratio": TARGET_RATIO,
        "target_met": ratio >= TARGET_RATIO,
        "targets": targets,
        "latency": lat,
    }
    print()
    print(text_report(result))
    return result


def text_report(result: dict[str, Any]) -> str:
    t = result["throughput"]
    p = result["params"]
    # From the recorded run, not the registry: a report regenerated later must not
    # take the subscriptions of today's code for those that were measured.
    first = t["ours"]["runs"][0]
    per_message = first["effects"] // first["messages"]
    rows = [
        [
            f"ours: outbox drain ({per_message} effects/msg)",
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
    lat = result["latency"]
    latency_rows = [
        ["commit -> notification", *lat["notification_ms"].values()],
        [
            f"commit -> all {per_message} effects",
            *lat["all_effects_ms"].values(),
        ],
    ]
    met = "met" if result["target_met"] else "NOT met"
    drained = lat.get("drained_after_s")
    targets = result.get("targets", {})
    verdicts = ", ".join(
        f"{name} {'met' if t['met'] else 'NOT met'} ({t['target']:g})"
        for name, t in targets.items()
    )
    return "\n".join(
        [
            f"Drain throughput: N={p['loans']} messages, W={p['workers']} workers,"
            f" median of {p['repeats']} interleaved runs",
            format_table(["side", "wall s", "messages/s", "effects/s"], rows),
            f"ratio ours/baseline (messages/s): {result['ratio_messages_per_s']:.2f}x"
            f"  (per pair: {', '.join(f'{r:.2f}' for r in result['pair_ratios'])});"
            f" target >= {result['target_ratio']}x {met}",
            "drain jobs running at once (ours, most seen):"
            f" {result['max_parallel_drains']} of {p['workers']} workers",
            "",
            f"Commit-to-effect latency: {lat['loans']} loans offered at"
            f" {p['rate']:g}/s for {p['duration']:g} s"
            f" (achieved {lat['achieved_rate']:g}/s from"
            f" {_issuing(p.get('issuers', 1))}), W={p['workers']} + scheduler",
            format_table(["ms", "p50", "p90", "p99", "max"], latency_rows),
            "backlog empty after the load stopped: "
            + ("never (see missing effects)" if drained is None else f"{drained:g} s"),
            f"missing effects at the end: {lat['missing_effects']}"
            f" (notifications: {lat['missing_notifications']})",
            *cpu_lines(lat.get("cpu_s")),
            *([f"targets: {verdicts}"] if verdicts else []),
        ]
    )


def _issuing(threads: int) -> str:
    return "1 issuing thread" if threads == 1 else f"{threads} issuing threads"


def cpu_lines(cpu_s: dict[str, float] | None) -> list[str]:
    """Where the CPU went while the load was issued: what a short rate was bound by."""
    if not cpu_s:
        return []  # a run recorded before the meter existed
    capacity = cpu_s["capacity"]
    parts = [name for name in cpu_s if name not in ("machine", "capacity")]
    shares = ", ".join(
        f"{'issuer (this process)' if name == 'this process' else name}"
        f" {cpu_s[name]:.1f} s ({cpu_s[name] / capacity:.0%})"
        for name in parts
    )
    return [
        f"CPU while issuing: {cpu_s['machine']:.1f} of {capacity:.1f} core-seconds"
        f" busy ({cpu_s['machine'] / capacity:.0%}): {shares}"
    ]


def markdown_report(document: dict[str, Any]) -> str:
    return markdown_page(
        document,
        title="Messaging benchmark (outbox)",
        report=text_report(document["results"][NAME]),
        note="Ratios are medians of runs interleaved with the baseline on the same"
        " machine; compare ratios, not absolute times (see bench/README.md).",
    )
