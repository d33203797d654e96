"""The project's own processes: start them, wait for them, stop them and their children.

One toolkit for every place that runs a ``manage.py`` command or a daphne as a child:
the labs' live parts, the tests and the benchmarks.

- **Environment**: ``child_environment`` points a child at the database and Redis
  database this process uses, whatever the environment said.
- **Starting**: ``start`` runs a command in a process group of its own;
  ``manage_command`` and ``daphne_command`` are the only builders of those command
  lines; ``free_port`` finds a port for a server.
- **Waiting**: ``wait_until`` (and ``await_until`` inside an event loop) polls one
  condition until a deadline, the one way to wait for another process.
- **Stopping**: ``stop`` asks a process to finish (SIGTERM to its group), then kills
  what is left of it and of everything it started; ``kill`` does the second part at
  once. rq's work-horse calls ``setpgrp()`` and so leaves its worker's group, where a
  group signal cannot reach it: the family is found through ``/proc`` instead, each
  member with its start time, so a pid reused meanwhile is never signalled.

Django is imported but not configured here (``child_environment`` reads the settings
when called), so a process may import this before it chooses its settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Final, TypeVar
from urllib.parse import quote, urlparse

from django.conf import settings
from django.db import connection

from config.cpu_priority import (
    AUTOGROUP_LOWEST_NICE,
    child_group_options,
    lower_own_autogroup,
)

ROOT: Final = Path(__file__).resolve().parent.parent
# Generous on purpose: a wait ends as soon as its condition holds, so the deadline
# costs nothing on a quick machine and only a hung process ever reaches it.
WAIT_S: Final = 60.0
POLL_S: Final = 0.02
# How long a stopped process may take to finish what it holds (an rq worker's warm
# shutdown waits for the job in hand) before it is killed.
STOP_GRACE_S: Final = 10.0
ASGI_APPLICATION: Final = "config.asgi:application"

T = TypeVar("T")
log = logging.getLogger("config.processes")


class WaitTimeout(TimeoutError):
    """The condition of a wait did not hold before its deadline."""


class ProcessExited(RuntimeError):
    """A child process ended while something still waited for it."""


# --- The child's environment -------------------------------------------------------


def run_below_the_library() -> None:
    """Put this process, and everything it starts from now on, below the library's.

    For the lab and drill processes: niced by ``LAB_NICE`` and, where Linux allows,
    in the SCHED_IDLE class (``LAB_SCHED_IDLE``). Call it before starting threads:
    the class is set on the calling thread, and threads and children inherit it.

    A process that leads its own session (the Procfiles exec the lab worker for
    this; systemd, the tests and the benchmarks start it so) also lowers its
    session's autogroup, which ``start`` then keeps its children in: without that,
    a lab's processes, each in a session of its own, would each weigh as much as
    the web server however niced.
    """
    os.nice(settings.LAB_NICE)
    idle = settings.LAB_SCHED_IDLE and hasattr(os, "SCHED_IDLE")
    if not lower_own_autogroup(AUTOGROUP_LOWEST_NICE if idle else settings.LAB_NICE):
        log.warning(
            "this lab process does not lead its session, so its session's CPU group "
            "stays as heavy as the web server's: start it as a session leader "
            "(exec it from a shell; see the Procfile)"
        )
    if not idle:
        return
    with contextlib.suppress(OSError):  # refused (a container's seccomp): niced only
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def current_database_url() -> str:
    """Return a DATABASE_URL naming the database this process is connected to."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    user = quote(db.get("USER") or "")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{db['NAME']}"


def child_environment(**extra: str) -> dict[str, str]:
    """Return the environment of a child sharing this process's database and Redis."""
    redis_db = urlparse(settings.REDIS_URL).query.removeprefix("db=") or (
        urlparse(settings.REDIS_URL).path.lstrip("/") or "0"
    )
    return {
        **os.environ,
        "DEBUG": "true" if settings.DEBUG else os.environ.get("DEBUG", "false"),
        "DATABASE_URL": current_database_url(),
        "LIBRARY_REDIS_DB": redis_db,
        "LIBRARY_VAR_DIR": str(settings.VAR_DIR),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


# --- Starting ----------------------------------------------------------------------


def manage_command(*args: str) -> list[str]:
    """Return the command line of ``manage.py ARGS`` with this interpreter."""
    return [sys.executable, str(ROOT / "manage.py"), *args]


def daphne_command(
    port: int, *, proxy_headers: bool = False, application: str = ASGI_APPLICATION
) -> list[str]:
    """Return the command line of a daphne of the project on 127.0.0.1:``port``.

    ``proxy_headers`` trusts X-Forwarded-For/-Proto, as daphnes behind a balancer do.
    """
    return [
        sys.executable,
        *("-m", "daphne"),
        *(["--proxy-headers"] if proxy_headers else []),
        *("-b", "127.0.0.1", "-p", str(port)),
        application,
    ]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago, for a child server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stdout: IO[bytes] | int = subprocess.DEVNULL,
    stderr: IO[bytes] | int = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` from the project's root in a process group of its own.

    A signal to the group reaches it and what it forks (but see ``stop`` for rq's
    work-horses). The group is in a session of its own, except below the library,
    where it stays in this process's session (see ``run_below_the_library``).
    ``env`` defaults to ``child_environment()``; the output is dropped unless told.
    """
    return subprocess.Popen(
        list(argv),
        cwd=ROOT,
        env=env if env is not None else child_environment(),
        stdout=stdout,
        **child_group_options(),
        stderr=stderr,
    )


def start_manage(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``manage.py ARGS`` in a process group of its own (see ``start``)."""
    return start(manage_command(*args), env=env)


def start_daphne(
    port: int,
    env: dict[str, str] | None = None,
    *,
    proxy_headers: bool = False,
    timeout: float = WAIT_S,
) -> subprocess.Popen[bytes]:
    """Start a daphne of the project on ``port`` and return once it listens."""
    process = start(daphne_command(port, proxy_headers=proxy_headers), env=env)
    try:
        wait_listening(port, process, timeout=timeout)
    except BaseException:
        kill(process)
        raise
    return process


# --- Waiting -----------------------------------------------------------------------


def wait_until(
    condition: Callable[[], T | None],
    what: str,
    *,
    timeout: float = WAIT_S,
    interval: float = POLL_S,
    alive: Callable[[], object] | None = None,
) -> T:
    """Poll ``condition`` until it returns something true, and return that.

    ``alive`` runs between polls and raises when the wait is hopeless (a child it
    depends on has died); past ``timeout`` seconds ``WaitTimeout`` names ``what``.
    Wait for the exact condition needed next, never for a fixed time.
    """
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise WaitTimeout(f"waited {timeout:g} s for {what}")
        time.sleep(interval)
    return value


async def await_until(
    condition: Callable[[], T | None],
    what: str,
    *,
    timeout: float = WAIT_S,
    interval: float = POLL_S,
) -> T:
    """``wait_until`` for a condition that the running event loop itself makes true."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise WaitTimeout(f"waited {timeout:g} s for {what}")
        await asyncio.sleep(interval)
    return value


def listening(port: int) -> bool:
    """Return whether something accepts connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def exited_check(process: subprocess.Popen[bytes], what: str) -> Callable[[], None]:
    """Return a check that raises ``ProcessExited`` once ``process`` has ended."""

    def check() -> None:
        code = process.poll()
        if code is not None:
            raise ProcessExited(f"{what} exited with status {code}")

    return check


def wait_listening(
    port: int,
    process: subprocess.Popen[bytes],
    *,
    timeout: float = WAIT_S,
    what: str = "",
) -> None:
    """Wait until ``process`` listens on ``port``; raise if it exits first."""
    name = what or f"the server on port {port}"
    wait_until(
        lambda: listening(port),
        f"{name} to listen",
        timeout=timeout,
        interval=0.1,
        alive=exited_check(process, name),
    )


# --- Processes in /proc ------------------------------------------------------------


def _stat_after_name(pid: int) -> list[str] | None:
    """Return the fields of ``/proc/<pid>/stat`` after the command name, if any."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
    return stat.rsplit(")", 1)[-1].split()


def start_time(pid: int) -> str | None:
    """Return the process's start time (clock ticks since boot), None once it is gone.

    With the pid it names one process for good: a pid is reused, a start time not.
    """
    fields = _stat_after_name(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def process_gone(pid: int) -> bool:
    """Return whether ``pid`` has exited (gone, or a zombie not yet reaped)."""
    fields = _stat_after_name(pid)
    return fields is None or fields[0] in ("Z", "X")


def _parents() -> dict[int, int]:
    """Return every living process's parent, read from /proc in one pass."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_after_name(int(entry.name))
            if fields is not None and len(fields) > 1:
                found[int(entry.name)] = int(fields[1])
    return found


def children(pid: int) -> list[int]:
    """Return the pids whose parent is ``pid``."""
    return sorted(child for child, parent in _parents().items() if parent == pid)


def descendants(pid: int) -> dict[int, str]:
    """Return every living descendant of ``pid`` with its start time.

    A process's children, theirs, and so on, whatever their process group: rq's
    work-horse is found here while its worker lives.
    """
    parents = _parents()
    below: dict[int, list[int]] = {}
    for child, parent in parents.items():
        below.setdefault(parent, []).append(child)
    found: dict[int, str] = {}
    stack = [pid]
    while stack:
        for child in below.get(stack.pop(), []):
            started = start_time(child)
            if started is not None and child not in found:
                found[child] = started
                stack.append(child)
    return found


# --- Stopping ----------------------------------------------------------------------


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to the process group ``start`` gave the process.

    The group is the process and what it forked without leaving it; rq's work-horse
    (which calls ``setpgrp()``) is not in it. Only a child started in a session of
    its own leads a group named by its pid, so only those are passed here.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _kill_family(process: subprocess.Popen[bytes], family: dict[int, str]) -> None:
    """SIGKILL the process's group and every recorded descendant still the same."""
    signal_group(process, signal.SIGKILL)
    if process.poll() is None:
        process.kill()  # not a group leader: started without ``start``
    for pid, started in family.items():
        if start_time(pid) == started:  # not a pid reused since it was recorded
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_GRACE_S)


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process, its group and all its descendants (work-horses too)."""
    _kill_family(process, descendants(process.pid))


def stop(process: subprocess.Popen[bytes], *, grace: float = STOP_GRACE_S) -> None:
    """Stop the process and everything it started (see ``stop_all``)."""
    stop_all([process], grace=grace)


def stop_all(
    processes: Sequence[subprocess.Popen[bytes]], *, grace: float = STOP_GRACE_S
) -> None:
    """Stop the processes together: SIGTERM to each group, then kill what is left.

    SIGTERM is a warm shutdown for an rq worker (it finishes the job in hand; a
    second SIGTERM would be a cold one, so it is sent once) and a clean exit for
    daphne. Once every process has ended, or ``grace`` seconds have passed, each
    group and every descendant recorded before and after the signal are killed: a
    work-horse outside its worker's group, a child a process left behind.
    """
    families = [descendants(process.pid) for process in processes]
    for process in processes:
        if process.poll() is None:
            signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process, family in zip(processes, families, strict=True):
        _kill_family(process, {**family, **descendants(process.pid)})


@contextlib.contextmanager
def running(
    *processes: subprocess.Popen[bytes], grace: float = STOP_GRACE_S
) -> Iterator[None]:
    """Stop (``stop_all``) the given processes however the block ends."""
    try:
        yield
    finally:
        stop_all(processes, grace=grace)
