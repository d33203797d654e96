"""The class benchmark: a whole class presses Run on one lesson's live part at once.

The system runs as ``make run`` runs it: one daphne, one rq worker (with its
scheduler), the scheduler process and one lab worker (``manage.py labworker``,
live slots one per core, niced). Everything is measured over real HTTP, from this
process, against that daphne.

1. **Idle** (the baseline): the home page is fetched ten times a second for
   ``idle_s`` seconds and loans are issued one every ``loan_every_s``; the page's
   p99 and each loan's commit → notification time are the reference.
2. **Class**: ``learners`` learners, signed in through the site's form before the
   phase starts, press Run with the live part on
   ``lesson`` within ``press_window_s`` seconds (evenly spread), ``identical`` of them
   with the defaults and the rest each with parameters of their own, then follow
   their run over its event stream, as the lesson page does. Meanwhile the home
   page is probed and ``loans`` loans are issued as in the idle phase.
3. **Flood**: ``flood`` anonymous visitors, each with a fresh session, ask for a
   heavy model run (``cache-metrics``, 100x the requests, twelve capacities) as
   fast as eight threads can send, while loans are issued again.

The targets (issue #23): every learner gets a live result, none is refused, the
last within 90 s of the first press; the identical requests share one run; the home
page's p99 during the class at most 2x its idle p99; a loan's notification p99
within 1 s during the class and during the flood.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.common import (
    BenchError,
    Children,
    CpuMeter,
    collect_static,
    format_table,
    markdown_page,
    percentile,
    run_queue_wait,
    wait_until,
)
from config.processes import ROOT, daphne_command, free_port, manage_command

NAME = "class"
TARGET_LAST_S = 90.0
TARGET_HOME_RATIO = 2.0
TARGET_NOTIFY_P99_MS = 1000.0
PASSWORD = "bench-class-pass-phrase-1"
HEAVY = {"requests": "200000", "capacities": "1,2,3,4,5,6,7,8,9,10,11,12"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("class")
    group.add_argument("--class-learners", type=int, help="learners (default 30)")
    group.add_argument(
        "--class-lesson",
        help="the lesson whose live part they run (delivery-semantics)",
    )
    group.add_argument("--class-flood", type=int, help="anonymous heavy runs (200)")


@dataclass(frozen=True)
class Params:
    learners: int
    identical: int
    lesson: str
    flood: int
    press_window_s: float = 10.0
    # Long enough for a p99 as steady as the class phase's: that one takes some 800
    # samples, and 20 s (about 240) made the idle p99 the third-slowest answer.
    idle_s: float = 60.0
    loans: int = 50
    loan_every_s: float = 0.5
    probe_every_s: float = 0.1
    deadline_s: float = 300.0

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> Params:
        learners = options.class_learners or (10 if options.quick else 30)
        return cls(
            learners=learners,
            identical=learners // 2,
            lesson=options.class_lesson or "delivery-semantics",
            flood=options.class_flood or (40 if options.quick else 200),
            idle_s=8.0 if options.quick else 60.0,
            loans=20 if options.quick else 50,
        )


# --- The site, its learners and its library ---------------------------------------


def own_params(lesson: str, n: int) -> dict[str, str]:
    """Return the n-th learner's own parameters: each a different experiment."""
    from course.labs.registry import lab_get

    lab = lab_get(lesson)
    sized = [p for p in lab.params if p.kind == "int" and p.work == "value"]
    if not sized:
        raise BenchError(f"{lesson} has no size parameter to vary")
    param = sized[0]
    default = int(param.default) if isinstance(param.default, int) else 1
    return {param.name: str(default + 1 + n)}


def create_learners(count: int) -> list[str]:
    from django.contrib.auth import get_user_model

    users = get_user_model()
    names = [f"bench-learner-{n}" for n in range(count)]
    for name in names:
        users.objects.create_user(name, password=PASSWORD)
    return names


def signed_in_client(base: str, name: str) -> Any:
    """Return an httpx client signed in through the site's own sign-in form."""
    import httpx

    client = httpx.Client(base_url=base, timeout=30.0, follow_redirects=False)
    form = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    if token is None:
        raise BenchError("the sign-in form carries no CSRF token")
    answer = client.post(
        "/accounts/login/",
        data={"login": name, "password": PASSWORD, "csrfmiddlewaretoken": token[1]},
        headers={"Referer": f"{base}/accounts/login/"},
    )
    if answer.status_code != 302 or "sessionid" not in client.cookies:
        raise BenchError(f"{name} could not sign in: {answer.status_code}")
    return client


def csrf_of(client: Any, path: str) -> str:
    page = client.get(path)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    if token is None:
        raise BenchError(f"{path} carries no CSRF token")
    return str(token[1])


def start_system(children: Children) -> str:
    """Start web, worker, scheduler and lab worker; return the site's base URL."""
    port = free_port()
    children.environment.update(
        {
            # The learners all sign in from this one address before the class
            # starts: not what the sign-in limit guards against.
            "LIBRARY_LOGIN_RATE": "1000/m/ip",
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "SECURE_COOKIES": "false",
            "SECURE_HSTS_SECONDS": "0",
        }
    )
    children.start(
        "class-web",
        daphne_command(port),
    )
    children.start(
        "class-worker",
        manage_command("rqworker", "default", "messaging", "--with-scheduler"),
    )
    children.start("class-drainer", manage_command("drainer"))
    children.start("class-scheduler", manage_command("scheduler"))
    children.start("class-labs", manage_command("labworker"))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base), timeout=90, what="daphne", children=children)
    except BenchError as error:
        log = children.log_text("class-web")[-3000:]
        raise BenchError(f"{error}; its log:\n{log}") from None
    from course.models import LabWorkerState

    wait_until(
        LabWorkerState.objects.exists,
        timeout=90,
        what="the lab worker's heartbeat",
        children=children,
    )
    return base


def _answers(base: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{base}/", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def warm_sandbox_template() -> None:
    """Build the sandboxes' template database before the clock starts.

    The first live run on a new migration state or day migrates and seeds it (tens
    of seconds, once); a class arriving later finds it ready.
    """
    from course.sandbox import sandbox_create, sandbox_remove

    sandbox_remove(sandbox_create())


# --- Load running beside a phase ----------------------------------------------------


@dataclass
class Probe:
    """Fetches a page at a steady rate from a process of its own (``bench.probe``)
    and keeps each latency (ms)."""

    base: str
    path: str
    every_s: float
    latencies_ms: list[float] = field(default_factory=list)
    # The answers the page tier rendered (X-Page-Cache: miss) rather than read.
    rendered_ms: list[float] = field(default_factory=list)
    failures: int = 0
    _process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "bench.probe", self.base, self.path]
        self._process = subprocess.Popen(
            [*command, str(self.every_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def stop(self) -> list[float]:
        assert self._process is not None
        output, _ = self._process.communicate(input="", timeout=60)
        if self._process.returncode != 0:
            raise RuntimeError(f"the page probe exited {self._process.returncode}")
        for line in output.splitlines():
            took, _, state = line.partition(" ")
            if took == "failed":
                self.failures += 1
                continue
            self.latencies_ms.append(float(took))
            if state not in ("hit", "stale"):
                self.rendered_ms.append(float(took))
        return self.latencies_ms


@dataclass
class WaitMeter:
    """The mean time each process's main thread waited for a CPU each time it
    became runnable, in µs, between construction and ``stop`` (``run_queue_wait``).

    Tells the scheduler's share of a slower answer (a server waiting for a core)
    from the rest (the work itself, caches, the network stack).
    """

    pids: list[int]
    _before: list[tuple[float, int] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._before = [run_queue_wait(pid) for pid in self.pids]

    def stop(self) -> list[float | None]:
        means: list[float | None] = []
        for pid, before in zip(self.pids, self._before, strict=True):
            after = run_queue_wait(pid)
            if before is None or after is None or after[1] == before[1]:
                means.append(None)
                continue
            waited_s, turns = after[0] - before[0], after[1] - before[1]
            means.append(round(waited_s / turns * 1e6, 1))
        return means


def issue_loans_steadily(count: int, every_s: float) -> threading.Thread:
    """Issue ``count`` loans through the service, one every ``every_s``, in a thread."""
    from django.db import connection

    from library.models import Book, Member
    from library.services import loan_issue

    books = list(
        Book.objects.filter(title__startswith="Class book").values_list("pk", flat=True)
    )
    members = list(
        Member.objects.filter(first_name="Class").values_list("pk", flat=True)
    )

    def issue() -> None:
        try:
            began = time.monotonic()
            for n in range(count):
                time.sleep(max(0.0, began + n * every_s - time.monotonic()))
                loan_issue(
                    book_id=books[n % len(books)], member_id=members[n % len(members)]
                )
        finally:
            connection.close()

    thread = threading.Thread(target=issue, daemon=True)
    thread.start()
    return thread


def create_loan_library() -> None:
    import datetime

    from library.models import Book, Branch, Member

    branch = Branch.objects.create(name="Class branch", city="Bench")
    Book.objects.bulk_create(
        [
            Book(
                title=f"Class book {n}",
                author="Bench",
                branch=branch,
                on_shelf=1_000_000,
            )
            for n in range(20)
        ]
    )
    Member.objects.bulk_create(
        [
            Member(
                first_name="Class",
                last_name=str(n),
                registered_at=datetime.date(2024, 1, 1),
            )
            for n in range(50)
        ]
    )


def notification_ms(since_message_id: int) -> tuple[list[float], int]:
    """Return commit → notification (ms) of loans after ``since_message_id``, and
    how many loans have none yet."""
    from library.models import Notification
    from messaging.models import OutboxMessage

    created = dict(
        OutboxMessage.objects.filter(
            pk__gt=since_message_id, type="loan_issued"
        ).values_list("id", "created_at")
    )
    notified = dict(
        Notification.objects.filter(source_message_id__in=list(created)).values_list(
            "source_message_id", "created_at"
        )
    )
    times = [(notified[m] - created[m]).total_seconds() * 1000 for m in notified]
    return times, len(created) - len(notified)


def last_message_id() -> int:
    from messaging.models import OutboxMessage

    return int(
        OutboxMessage.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    )


def loans_done(since: int, count: int, children: Children) -> None:
    wait_until(
        lambda: (
            notification_ms(since)[1] == 0 and len(notification_ms(since)[0]) >= count
        ),
        timeout=60,
        what="every loan's notification",
        children=children,
        interval=0.2,
        required=False,
    )


# --- The class ----------------------------------------------------------------------


@dataclass
class LearnerRun:
    learner: int
    own: bool
    pressed_s: float = 0.0
    status: int = 0
    job: str = ""
    joined: bool = False
    reused: bool = False
    finished_s: float | None = None
    state: str = ""
    error: str = ""


def learner_presses(
    client: Any,
    base: str,
    lesson: str,
    run: LearnerRun,
    params: dict[str, str],
    started: float,
) -> None:
    """Press Run with the live part, then follow the run to its end."""
    token = csrf_of(client, f"/course/{lesson}/")
    run.pressed_s = time.monotonic() - started
    answer = client.post(
        f"/course/{lesson}/run",
        data={**params, "live": "on", "csrfmiddlewaretoken": token},
        headers={"Accept": "application/json", "X-CSRFToken": token, "Referer": base},
    )
    run.status = answer.status_code
    if answer.status_code != 202:
        run.error = answer.text[:200]
        return
    body = answer.json()
    run.job, run.joined, run.reused = body["job"], body["joined"], body["reused"]
    job = follow_events(client, run.job, body["version"])
    run.state = str(job.get("state", ""))
    run.error = str(job.get("error") or "")
    run.finished_s = time.monotonic() - started


def follow_events(client: Any, job_id: str, version: int) -> dict[str, Any]:
    """Follow a run over its event stream, as the lesson page does; return the
    finished job. A broken stream is opened again from the last version seen."""
    import httpx

    while True:
        try:
            with client.stream(
                "GET",
                f"/realtime/jobs/{job_id}/events",
                params={"lastEventId": version},
                headers={"Accept": "text/event-stream"},
                timeout=httpx.Timeout(30.0, read=60.0),
            ) as stream:
                for line in stream.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = json.loads(line[5:])
                    job = payload.get("job", payload)
                    version = int(job.get("version", version))
                    if job.get("finished"):
                        return dict(job)
        except httpx.HTTPError:
            time.sleep(1.0)


def run_class(base: str, clients: list[Any], params: Params) -> list[LearnerRun]:
    runs = [
        LearnerRun(learner=n, own=n >= params.identical) for n in range(len(clients))
    ]
    threads = []
    started = time.monotonic()
    spacing = params.press_window_s / max(1, len(clients))
    for n, (client, run) in enumerate(zip(clients, runs, strict=True)):
        mine = own_params(params.lesson, n - params.identical) if run.own else {}
        time.sleep(max(0.0, started + n * spacing - time.monotonic()))
        thread = threading.Thread(
            target=learner_presses,
            args=(client, base, params.lesson, run, mine, started),
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(timeout=params.deadline_s)
    for client in clients:
        client.close()
    return runs


def run_flood(base: str, count: int) -> dict[str, int]:
    """Send ``count`` heavy model runs, each from a fresh anonymous session."""
    import httpx

    statuses: dict[str, int] = {}
    lock = threading.Lock()
    numbers = iter(range(count))

    def send() -> None:
        while True:
            with lock:
                if next(numbers, None) is None:
                    return
            with httpx.Client(base_url=base, timeout=30.0) as client:  # fresh session
                token = csrf_of(client, "/course/cache-metrics/")
                answer = client.post(
                    "/course/cache-metrics/run",
                    data={**HEAVY, "csrfmiddlewaretoken": token},
                    headers={"Accept": "application/json", "Referer": base},
                )
            with lock:
                key = str(answer.status_code)
                statuses[key] = statuses.get(key, 0) + 1

    threads = [threading.Thread(target=send, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values), 1) if values else float("nan"),
    }


def phase(
    base: str, params: Params, children: Children, work: Callable[[], Any]
) -> dict[str, Any]:
    """Run ``work`` with the home-page probe and the loans beside it; measure both."""
    probe = Probe(base, "/", params.probe_every_s)
    since = last_message_id()
    meter = CpuMeter({name: [p.pid] for name, p in children.processes.items()})
    web = children.processes["class-web"].pid
    meter.start()
    probe.start()
    waits = WaitMeter([web, probe.pid])
    loans = issue_loans_steadily(params.loans, params.loan_every_s)
    began = time.monotonic()
    outcome = work()
    loans.join()
    web_wait, probe_wait = waits.stop()
    home = probe.stop()
    cpu = meter.stop()
    loans_done(since, params.loans, children)
    notified, missing = notification_ms(since)
    return {
        "wall_s": round(time.monotonic() - began, 1),
        "home_ms": _summary(home),
        "home_failures": probe.failures,
        "home_rendered_ms": _summary(probe.rendered_ms),
        "notification_ms": _summary(notified),
        "notifications_missing": missing,
        "run_queue_wait_us": {"web": web_wait, "probe": probe_wait},
        "cpu_s": cpu,
        "outcome": outcome,
    }


def run(children: Children, options: argparse.Namespace) -> dict[str, Any]:
    params = Params.from_options(options)
    collect_static(children)
    create_loan_library()
    names = create_learners(params.learners)
    print("building the sandboxes' template database", flush=True)
    warm_sandbox_template()
    base = start_system(children)
    print(f"idle: {params.idle_s:.0f} s", flush=True)
    idle = phase(base, params, children, lambda: time.sleep(params.idle_s))
    # Signed in before the class phase: the issue's learners are signed in when they
    # press Run, and thirty sign-ins (a PBKDF2 hash each, about 0.3 s of a core on
    # a quick host) are a burst of their own, not the class's.
    clients = [signed_in_client(base, name) for name in names]
    print(f"class: {params.learners} learners on {params.lesson}", flush=True)
    in_class = phase(base, params, children, lambda: run_class(base, clients, params))
    runs: list[LearnerRun] = in_class.pop("outcome")
    print(f"flood: {params.flood} anonymous heavy runs", flush=True)
    flood = phase(base, params, children, lambda: run_flood(base, params.flood))
    flood["statuses"] = flood.pop("outcome")
    result = {
        "params": asdict(params),
        "idle": {k: v for k, v in idle.items() if k != "outcome"},
        "class": in_class,
        "runs": [asdict(run) for run in runs],
        "flood": flood,
    }
    result["summary"] = summarise(result, params)
    print(text_report(result), flush=True)
    return result


def summarise(result: dict[str, Any], params: Params) -> dict[str, Any]:
    from course.models import LabRun

    runs = result["runs"]
    done = [r for r in runs if r["state"] == "done"]
    refused = [r for r in runs if r["status"] != 202]
    finished = [r["finished_s"] for r in runs if r["finished_s"] is not None]
    identical_jobs = [r["job"] for r in runs if not r["own"] and r["job"]]
    leaders = set(
        LabRun.objects.filter(pk__in=identical_jobs, leader__isnull=False).values_list(
            "leader_id", flat=True
        )
    ) | set(
        LabRun.objects.filter(pk__in=identical_jobs, leader__isnull=True).values_list(
            "pk", flat=True
        )
    )
    idle_p99 = result["idle"]["home_ms"]["p99"]
    class_p99 = result["class"]["home_ms"]["p99"]
    ratio = class_p99 / idle_p99 if idle_p99 else float("nan")
    summary = {
        "live_results": len(done),
        "refused": len(refused),
        "last_result_s": round(max(finished), 1) if finished else None,
        "experiments_for_identical": len(leaders),
        "home_p99_ratio": round(ratio, 2),
        "class_notification_p99_ms": result["class"]["notification_ms"]["p99"],
        "flood_notification_p99_ms": result["flood"]["notification_ms"]["p99"],
    }
    summary["targets_met"] = {
        "every learner a live result": len(done) == params.learners,
        "none refused": not refused,
        "last within 90 s": bool(finished) and max(finished) <= TARGET_LAST_S,
        "identical share one run": len(leaders) == 1,
        "home p99 <= 2x idle": ratio <= TARGET_HOME_RATIO,
        "notification p99 <= 1 s (class)": summary["class_notification_p99_ms"]
        <= TARGET_NOTIFY_P99_MS,
        "notification p99 <= 1 s (flood)": summary["flood_notification_p99_ms"]
        <= TARGET_NOTIFY_P99_MS,
    }
    return summary


def _rendered(part: dict[str, Any]) -> str:
    # Results written before the probe told hits from renders have no such entry.
    rendered = part.get("home_rendered_ms")
    return "-" if rendered is None else f"{rendered['n']} / {rendered['p50']}"


def _waits(part: dict[str, Any]) -> str:
    # Results written before the wait was measured have no such entry.
    waits = part.get("run_queue_wait_us")
    if waits is None:
        return "-"
    return " / ".join("-" if v is None else f"{v:g}" for v in waits.values())


def text_report(result: dict[str, Any]) -> str:
    summary = result["summary"]
    rows = []
    for name in ("idle", "class", "flood"):
        part = result[name]
        rows.append(
            [
                name,
                part["wall_s"],
                part["home_ms"]["p50"],
                part["home_ms"]["p99"],
                _rendered(part),
                part["notification_ms"]["p50"],
                part["notification_ms"]["p99"],
                part["notifications_missing"],
                _waits(part),
            ]
        )
    lines = [
        format_table(
            [
                "phase",
                "wall s",
                "home p50 ms",
                "home p99 ms",
                "rendered n / p50",
                "notify p50 ms",
                "notify p99 ms",
                "missing",
                "CPU wait µs web / probe",
            ],
            rows,
        ),
        "",
        f"class: {summary['live_results']} of {len(result['runs'])} live results,"
        f" {summary['refused']} refused, last {summary['last_result_s']} s after the"
        " first press; the identical requests ran"
        f" {summary['experiments_for_identical']} experiment(s)",
        f"home page p99 in class / idle: {summary['home_p99_ratio']}",
        f"flood answers: {result['flood']['statuses']}",
        "",
        *(
            f"[{'x' if ok else ' '}] {name}"
            for name, ok in summary["targets_met"].items()
        ),
    ]
    return "\n".join(lines)


def markdown_report(document: dict[str, Any]) -> str:
    result = document["results"][NAME]
    cpu = result["class"]["cpu_s"]
    parts = ", ".join(f"{name} {value}" for name, value in cpu.items())
    return markdown_page(
        document,
        title="A class at once: live runs, the home page and loans beside them",
        report=text_report(result),
        note=(
            "Home page and notification times are measured beside each phase, from"
            " this process over real HTTP (the page) and from the database's own"
            " timestamps (outbox message → notification row). CPU wait: the mean"
            " time the web server's and the probe's main thread waited for a core"
            " each time they became runnable (/proc/PID/schedstat). CPU seconds"
            f" during the class, per process: {parts}."
        ),
    )
