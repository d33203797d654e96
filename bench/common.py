"""What every benchmark shares: an isolated database and Redis, child processes, stats.

Isolation is the first rule: a benchmark never touches the developer's data. It gets
its own database (``var/bench.sqlite3``, or the PostgreSQL database ``library_bench``)
recreated on every run, and Redis database ``BENCH_REDIS_DB``, flushed before each
phase. Both reach every child process through the environment, which is also the only
way ``config.settings`` is configured.

This module configures nothing of Django at import time: rq workers import ``noop``
from it, and ``python -m bench.common rqworker QUEUE`` starts a baseline worker. Its
children are started, awaited and stopped with the project's toolkit,
``config.processes``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from config.processes import (
    WaitTimeout,
    descendants,
    free_port,
    kill,
    listening,
    manage_command,
    start,
    stop,
)
from config.processes import wait_until as process_wait_until

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
VAR_DIR = ROOT / "var"
LOG_DIR = VAR_DIR / "bench-logs"
# One Redis database of its own (14 unless BENCH_REDIS_DB says otherwise, so two
# benchmark runs on one machine, in two checkouts, never flush each other's data).
BENCH_REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "14"))
SQLITE_PATH = VAR_DIR / "bench.sqlite3"
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/library_bench"
# A child server's start: Django's imports alone take seconds, and tens of them
# on a loaded 2-core machine; past this it is reported stuck, with its log.
SERVER_START_S = 180.0
PORT_ATTEMPTS = 3
LOG_TAIL_LINES = 20


class BenchError(RuntimeError):
    """The benchmark cannot run as asked (unsafe target, a child died, a timeout)."""


# --- The job of the baseline --------------------------------------------------


def noop() -> None:
    """Do nothing: the cheapest job rq can run, so only rq's own cost is measured."""


# --- Database and environment -------------------------------------------------


@dataclass(frozen=True)
class BenchDatabase:
    url: str

    @property
    def vendor(self) -> str:
        return "sqlite" if self.url.startswith("sqlite") else "postgresql"

    @property
    def name(self) -> str:
        """Return the database's name as Django will see it (a path for SQLite)."""
        import dj_database_url

        return str(dj_database_url.parse(self.url)["NAME"])

    def recreate(self) -> None:
        """Drop and create the database; refuse any database not named for benches."""
        if "bench" not in Path(self.name).name:
            raise BenchError(
                f"refusing to recreate {self.name!r}: a benchmark database's name must"
                " contain 'bench' (so it can never be the developer's database)"
            )
        if self.vendor == "sqlite":
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(self.name + suffix).unlink(missing_ok=True)
            return
        import dj_database_url
        import psycopg

        db = dj_database_url.parse(self.url)
        with psycopg.connect(
            dbname="postgres",
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            host=db.get("HOST") or "127.0.0.1",
            port=db.get("PORT") or 5432,
            autocommit=True,
        ) as conn:
            quoted = '"' + self.name.replace('"', '""') + '"'
            conn.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {quoted}")


def choose_database(*, postgres: bool) -> BenchDatabase:
    """Return the benchmark database: BENCH_DATABASE_URL, PostgreSQL, or SQLite."""
    url = os.environ.get("BENCH_DATABASE_URL", "").strip()
    if url:
        return BenchDatabase(url)
    if postgres:
        return BenchDatabase(POSTGRES_URL)
    return BenchDatabase(f"sqlite:///{SQLITE_PATH}")


def bench_environment(database: BenchDatabase) -> dict[str, str]:
    """Return the variables that point a process at the benchmark's data only.

    DEBUG is off, as in production (no query log in the workers being measured); a
    throwaway SECRET_KEY satisfies the settings' production check.
    """
    return {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": database.url,
        "LIBRARY_REDIS_DB": str(BENCH_REDIS_DB),
        "DEBUG": "false",
        "SECRET_KEY": "bench-" + secrets.token_urlsafe(48),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


def django_setup(environment: dict[str, str]) -> None:
    """Configure this process like the children, then check that it is isolated."""
    os.environ.update(environment)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings

    database = settings.DATABASES["default"]
    expected = BenchDatabase(environment["DATABASE_URL"]).name
    if str(database["NAME"]) != expected:
        raise BenchError(
            f"settings chose database {database['NAME']!r}, not {expected}"
        )
    redis_db = redis_connection().connection_pool.connection_kwargs.get("db")
    if int(redis_db or 0) != BENCH_REDIS_DB:
        raise BenchError(
            f"settings chose Redis database {redis_db}, not {BENCH_REDIS_DB}"
        )


def redis_connection() -> Any:
    """Return the Redis connection the messaging queue uses (``BENCH_REDIS_DB``)."""
    import django_rq

    return django_rq.get_connection("messaging")


def flush_bench_redis() -> None:
    """Empty the benchmark's Redis database, after checking its number."""
    connection = redis_connection()
    db = connection.connection_pool.connection_kwargs.get("db")
    if int(db or 0) != BENCH_REDIS_DB:
        raise BenchError(f"refusing to flush Redis database {db}")
    connection.flushdb()


# --- Child processes ----------------------------------------------------------


def baseline_worker(queue: str) -> list[str]:
    """Return the command of a baseline worker (see ``run_rqworker``)."""
    return [sys.executable, "-m", "bench.common", "rqworker", queue]


@dataclass
class Children:
    """Child processes, each in its own process group, all killed on exit.

    A group of its own lets one signal reach an rq worker and its forked work-horse.
    """

    environment: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _logs: dict[str, IO[bytes]] = field(default_factory=dict)
    # Where each child's part of its (appended) log begins.
    _log_starts: dict[str, int] = field(default_factory=dict)

    def log_text(self, name: str) -> str:
        """Return what the child named ``name`` wrote to its log in this run."""
        path = LOG_DIR / f"{name}.log"
        with open(path, "rb") as log:
            log.seek(self._log_starts.get(name, 0))
            return log.read().decode(errors="replace")

    def start(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        if name in self.processes:
            raise BenchError(f"a child named {name} is already running")
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log = open(LOG_DIR / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._log_starts[name] = log.tell()
        process = start(
            argv,
            env={**os.environ, **self.environment},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes[name] = process
        self._logs[name] = log
        return process

    def check_alive(self) -> None:
        """Raise ``BenchError`` naming a child that exited: its status and its log."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise BenchError(f"a child exited early:\n{self.report(name)}")

    def report(self, name: str, *, lines: int = LOG_TAIL_LINES) -> str:
        """Return what is known of child ``name``: status, CPU used, its log's end.

        A child still running with an empty log was busy (CPU seconds grow: still
        importing on a loaded machine) or blocked (they do not): the report says
        which, so a start that timed out can be told apart from a hang.
        """
        process = self.processes[name]
        code = process.poll()
        if code is None:
            state = stat_fields(process.pid)
            status = (
                f"running (pid {process.pid}, state {state[1][0]},"
                f" {process_tree_cpu_s(process.pid, children=False):.1f} s CPU)"
                if state is not None
                else f"running (pid {process.pid})"
            )
        elif code < 0:
            status = f"killed by signal {-code}"
        else:
            status = f"exited with status {code}"
        path = LOG_DIR / f"{name}.log"
        text = self.log_text(name).rstrip() if path.exists() else ""
        tail = "\n".join("    " + line for line in text.splitlines()[-lines:])
        return f"  {name}: {status}; log {path}:\n" + (tail or "    (empty log)")

    def start_server(
        self,
        name: str,
        command: Callable[[int], Sequence[str]],
        *,
        ready: Callable[[int], bool] | None = None,
        timeout: float = SERVER_START_S,
    ) -> int:
        """Start ``command(port)`` on a free port; return the port once it answers.

        ``ready(port)`` says it answers (default: it accepts connections). The port
        was free when chosen but another process on the machine may take it before
        the child binds it: a child that exits saying so is started again on
        another port. Any other exit, or no answer within ``timeout``, raises
        ``BenchError`` with the child's status and log (``report``).
        """
        check = ready or listening
        for _attempt in range(PORT_ATTEMPTS):
            port = free_port()
            process = self.start(name, command(port))

            def settled(
                process: subprocess.Popen[bytes] = process, port: int = port
            ) -> bool:
                return process.poll() is not None or (
                    check(port) and _listens_on(process.pid, port)
                )

            try:
                process_wait_until(
                    settled,
                    f"{name} to answer on port {port}",
                    timeout=timeout,
                    interval=0.1,
                )
            except WaitTimeout:
                raise BenchError(
                    f"{name} did not answer on port {port} within {timeout:.0f} s:\n"
                    + self.report(name)
                ) from None
            if process.poll() is None:
                return port
            if "address already in use" not in self.log_text(name).lower():
                raise BenchError(f"{name} exited while starting:\n{self.report(name)}")
            print(f"  {name}: port {port} was taken; starting it again", flush=True)
            self.stop(name)
        raise BenchError(f"{name}: no free port after {PORT_ATTEMPTS} attempts")

    def stop(self, name: str, *, grace: float = 10.0) -> None:
        """SIGTERM the child's group (a warm shutdown), SIGKILL it after ``grace``."""
        stop(self.processes.pop(name), grace=grace)
        self._logs.pop(name).close()

    def stop_all(self, *, grace: float = 10.0) -> None:
        for name in list(self.processes):
            self.stop(name, grace=grace)

    def kill_all(self) -> None:
        """SIGKILL every child and descendant: the path taken on Ctrl-C and errors."""
        for name in list(self.processes):
            kill(self.processes.pop(name))
            self._logs.pop(name).close()

    @contextlib.contextmanager
    def running(self) -> Iterator[Children]:
        try:
            yield self
        finally:
            self.kill_all()


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Make SIGTERM, SIGHUP and SIGINT end the run through ``finally`` blocks."""

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, leave) for s in (signal.SIGTERM, signal.SIGHUP)}
    # Ctrl-C raises KeyboardInterrupt even when started with SIGINT ignored (as a
    # shell does for a background job).
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_for_workers(
    queue: str, count: int, children: Children, *, timeout: float = 90.0
) -> None:
    """Wait until ``count`` rq workers listen on ``queue``: booted and idle."""
    from rq import Queue, Worker

    connection = redis_connection()
    wait_until(
        lambda: len(Worker.all(queue=Queue(queue, connection=connection))) >= count,
        timeout=timeout,
        what=f"{count} workers on {queue}",
        children=children,
    )


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    children: Children | None = None,
    interval: float = 0.05,
    required: bool = True,
) -> bool:
    """Poll ``condition``; return whether it came true in time.

    A child that died raises at once; a timeout raises only when ``required``.
    """
    try:
        process_wait_until(
            condition,
            what,
            timeout=timeout,
            interval=interval,
            alive=children.check_alive if children is not None else None,
        )
    except WaitTimeout:
        if required:
            # What each child was doing: a wait on a child is mostly a wait on
            # one that is still starting, or stuck.
            states = (
                "\n".join(children.report(name) for name in children.processes)
                if children is not None and children.processes
                else ""
            )
            raise BenchError(
                f"timed out after {timeout:.0f} s waiting for {what}"
                + (f"; the children:\n{states}" if states else "")
            ) from None
        return False
    return True


def migrate(children: Children) -> None:
    """Run ``manage.py migrate`` against the benchmark database, as a child."""
    result = subprocess.run(
        manage_command("migrate", "--noinput", "--verbosity", "0"),
        cwd=ROOT,
        env={**os.environ, **children.environment},
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        raise BenchError(f"migrate failed:\n{result.stderr.decode(errors='replace')}")


def collect_static(children: Children) -> None:
    """Run ``manage.py collectstatic`` for the children, as ``make run`` does.

    With DEBUG off the pages name manifest-hashed static files, as in production;
    the manifest comes from ``staticfiles/``.
    """
    result = subprocess.run(
        manage_command("collectstatic", "--noinput", "--verbosity", "0"),
        cwd=ROOT,
        env={**os.environ, **children.environment},
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        error = result.stderr.decode(errors="replace")
        raise BenchError(f"collectstatic failed:\n{error}")


# --- Numbers ------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], p: float) -> float:
    """Return the nearest-rank percentile (a value that was actually observed)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[rank - 1])


# --- Where the CPU went ---------------------------------------------------------

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_fields(pid: int | str) -> tuple[str, list[str]] | None:
    """Return (command name, the fields after it) of /proc/<pid>/stat, if it exists."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    return head.partition("(")[2], rest.split()


def process_tree_cpu_s(pid: int, *, children: bool) -> float:
    """CPU seconds of a process; with ``children``, of the children it reaped too.

    An rq worker reaps each work-horse it forks, so its children's time is the jobs'.
    """
    fields = stat_fields(pid)
    if fields is None:
        return 0.0
    values = fields[1]
    # After the name: state is field 0, utime 11, stime 12, cutime 13, cstime 14.
    ticks = int(values[11]) + int(values[12])
    if children:
        ticks += int(values[13]) + int(values[14])
    return ticks / _TICKS_PER_S


def process_cpu_s(pid: int) -> float:
    """CPU seconds a living process has used so far (0 once it is gone)."""
    return process_tree_cpu_s(pid, children=False)


def _listens_on(pid: int, port: int) -> bool:
    """Return whether process ``pid`` (or a descendant) holds the listening socket of
    ``port``: a port taken by another process answers too, but not for our child."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "ADDR:PORT" in hex, state 0A is LISTEN, inode field 9.
            if int(fields[1].rpartition(":")[2], 16) == port and fields[3] == "0A":
                inodes.add(f"socket:[{fields[9]}]")
    for member in (pid, *descendants(pid)):
        try:
            fds = list(Path(f"/proc/{member}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(fd) in inodes:
                    return True
    return False


def _postgres_cpu_s() -> float:
    """CPU seconds of every PostgreSQL process (reaped backends' in the postmaster)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(entry.name)
        if fields is not None and fields[0] == "postgres":
            total += process_tree_cpu_s(int(entry.name), children=True)
    return total


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    try:
        cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, cpu[:8])
    return (user + nice + system + irq + softirq + steal) / _TICKS_PER_S


def run_queue_wait(pid: int) -> tuple[float, int] | None:
    """Seconds ``pid``'s main thread has spent runnable but waiting for a CPU, and
    how many times it has been given one (``/proc/PID/schedstat``); None if gone.

    For a server whose event loop runs on its main thread (daphne), the wait per
    turn on a CPU is the scheduling delay each of its wake-ups paid.
    """
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text().split()
    except OSError:
        return None
    return int(fields[1]) / 1e9, int(fields[2])


@dataclass
class CpuMeter:
    """Where the machine's CPU went between ``start`` and ``stop``.

    Splits it into this process (the load's issuer), the named children (their
    reaped work-horses included), PostgreSQL, and the rest of the machine, so a
    report can say which of them a rate was bound by.
    """

    pids: dict[str, list[int]]
    _before: dict[str, float] = field(default_factory=dict)
    _began: float = 0.0

    def _sample(self) -> dict[str, float]:
        sample = {"this process": process_tree_cpu_s(os.getpid(), children=False)}
        for name, pids in self.pids.items():
            # Reaped children in their parent's count, living ones (a work-horse
            # mid-job) on their own: a job straddling a sample is counted once.
            living = [child for pid in pids for child in descendants(pid)]
            sample[name] = sum(
                process_tree_cpu_s(pid, children=True) for pid in pids
            ) + sum(process_tree_cpu_s(pid, children=False) for pid in living)
        sample["PostgreSQL"] = _postgres_cpu_s()
        sample["machine"] = machine_busy_s()
        return sample

    def start(self) -> None:
        self._before, self._began = self._sample(), time.monotonic()

    def stop(self) -> dict[str, float]:
        """Return CPU seconds per part, ``other``, ``machine`` and ``capacity``.

        ``capacity`` is wall time times cores: what the machine could have given.
        """
        after, wall = self._sample(), time.monotonic() - self._began
        used = {name: after[name] - self._before[name] for name in after}
        parts = sum(v for name, v in used.items() if name != "machine")
        used["other"] = max(0.0, used["machine"] - parts)
        used["capacity"] = wall * (os.cpu_count() or 1)
        return {name: round(value, 2) for name, value in used.items()}


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def speed_probe_ms(rounds: int = 3) -> float:
    """Return the best of ``rounds`` timings of a fixed loop of Python, in ms.

    The hosts these run on differ, and one host's speed changes with its
    neighbours (the same runs have taken twice the CPU seconds an hour apart):
    a figure in milliseconds or a share of the machine only compares with
    another taken at a similar probe. Ratios measured in one run do not need it.
    """
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        total = 0
        for n in range(1_000_000):
            total += n
        best = min(best, time.perf_counter() - began)
    return round(best * 1000, 1)


def machine_info() -> dict[str, Any]:
    """Describe where the numbers came from, including the code's exact state."""

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        )
        return result.stdout.strip()

    load = os.getloadavg()
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load],
        "speed_probe_ms": speed_probe_ms(),
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def _probe_said(machine: dict[str, Any]) -> str:
    probe = machine.get("speed_probe_ms")  # absent from results written before it
    return "" if probe is None else f", speed probe {probe} ms (lower is faster)"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Return a plain-text table with right-aligned numbers."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
        for i, h in enumerate(headers)
    ]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.ljust(w) if i == 0 else v.rjust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in cells)])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def markdown_page(
    document: dict[str, Any],
    *,
    title: str,
    report: str,
    note: str,
    database_note: str = "",
    show_database: bool = True,
    details: Sequence[str] = (),
) -> str:
    """Return a run's Markdown page: where and how it ran, ``report``, then ``note``.

    ``document`` is what ``python -m bench`` writes to the .json; ``database_note``
    follows the database's name, ``details`` are list items added after the command.
    """
    machine = document["machine"]
    database = [
        f"- database: {document['database']}{database_note},"
        f" Redis db {document['redis_db']}"
    ]
    dirty = " (working tree had uncommitted changes)" if machine["git_dirty"] else ""
    return "\n".join(
        [
            f"# {title}",
            "",
            f"- date: {document['date']}",
            *(database if show_database else []),
            f"- machine: {machine['cpus']} CPUs, {machine['platform']}, Python"
            f" {machine['python']}, load at start {machine['load_average_at_start']}"
            + _probe_said(machine),
            f"- code: {machine['git_commit'][:12]}{dirty}",
            f"- command: `{document['command']}`",
            *details,
            "",
            "```",
            report,
            "```",
            "",
            note,
            "",
        ]
    )


def write_results(stem: str, data: dict[str, Any], markdown: str) -> list[Path]:
    """Write ``results/<stem>.json`` and ``.md`` atomically; return their paths."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, text in (
        (".json", json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"),
        (".md", markdown),
    ):
        path = RESULTS_DIR / f"{stem}{suffix}"
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(text)
        temporary.replace(path)
        written.append(path)
    return written


# --- The baseline worker ------------------------------------------------------


def run_rqworker(queue: str) -> None:
    """Run ``manage.py rqworker`` on a queue that is not in ``RQ_QUEUES``.

    The queue is registered at run time with the messaging queue's configuration, so
    the baseline runs through the very command (worker class, fork per job, Redis
    connection, logging level) that runs the messaging drains.
    """
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.RQ_QUEUES[queue] = dict(settings.RQ_QUEUES["messaging"])
    call_command("rqworker", queue, verbosity=0)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "rqworker":
        sys.exit("usage: python -m bench.common rqworker QUEUE")
    run_rqworker(sys.argv[2])
