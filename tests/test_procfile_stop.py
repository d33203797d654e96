"""Stopping `make run`: an operator's SIGTERM or Ctrl-C ends it cleanly, with 0.

`make run` started honcho, which answers a stop by stopping every process and then
exits 143 (SIGTERM) or 130 (SIGINT): make reported "Error 143". It now starts
``scripts/procfile.py``, which passes the stop to honcho and ends with 0 once every
process is down. Here the project's Procfile runs as `make run` runs it (daphne, an
rq worker, the scheduler, on this test's database and Redis), and is stopped.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from config.cpu_priority import autogroup_nice
from config.processes import (
    ROOT,
    child_environment,
    free_port,
    wait_listening,
    wait_until,
)

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

LAUNCHER = ROOT / "scripts" / "procfile.py"


class Run:
    """The launcher as `make run` starts it, and every line it printed."""

    def __init__(self, *arguments: str, port: int | None = None) -> None:
        env = {
            **child_environment(),
            "HOST": "127.0.0.1",
            "PORT": str(port or free_port()),
            # The Procfile says "python": the Makefile puts the venv first on PATH.
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
        self.process = subprocess.Popen(
            [sys.executable, str(LAUNCHER), *arguments],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.decode(errors="replace").rstrip("\n"))

    def said(self, pattern: str) -> bool:
        return any(re.search(pattern, line) for line in self.lines)

    def pids(self) -> list[int]:
        """Return the pids honcho said it started."""
        found = (re.search(r"started \(pid=(\d+)\)", line) for line in self.lines)
        return [int(match.group(1)) for match in found if match]

    def finish(self) -> int:
        try:
            return self.process.wait(timeout=60)
        finally:
            self.reader.join(10)


@pytest.fixture
def make_run(redis_client: object) -> Iterator[tuple[Run, int]]:
    port = free_port()
    run = Run("start", "--env", "/dev/null", port=port)
    try:
        yield run, port
    finally:
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
            for pid in run.pids():
                kill_group_quietly(pid)
            run.process.wait()


def kill_group_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is gone for our purposes.
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" not in status.read_text()
    except FileNotFoundError:
        return False


def started(run: Run, port: int) -> None:
    """Wait until daphne listens and the workers and the scheduler are running."""
    wait_listening(port, run.process, timeout=60)
    wait_until(lambda: run.said(r"worker\.1 .*Listening on"), "the rq worker")
    wait_until(lambda: run.said(r"drainer\.1 .*drainer .* started"), "the drainer")
    wait_until(lambda: run.said(r"labs\.1 .*lab worker"), "the lab worker")
    wait_until(lambda: run.said(r"scheduler\.1 started"), "the scheduler")


def assert_lab_worker_group_lowered(run: Run) -> None:
    """The lab worker leads its session (the Procfile execs it) and has lowered the
    session's CPU group; the web server's group is untouched."""
    if not Path("/proc/self/autogroup").exists():
        return
    found = (re.search(r"(\w+)\.1 .*started \(pid=(\d+)\)", line) for line in run.lines)
    pids = {match[1]: int(match[2]) for match in found if match}

    if autogroup_nice(pids["labs"]) is None:
        return  # inside a CPU cgroup of its own: the kernel does not group by session
    assert os.getsid(pids["labs"]) == pids["labs"]
    wait_until(lambda: autogroup_nice(pids["labs"]) == 19, "the lab worker's group")
    assert autogroup_nice(pids["web"]) == 0


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_an_operators_stop_ends_make_run_with_0(make_run, stop):
    run, port = make_run
    started(run, port)
    children = run.pids()
    assert len(children) == 5  # web, worker, drainer, lab worker, scheduler
    assert_lab_worker_group_lowered(run)

    if stop == signal.SIGINT:
        # Ctrl-C: the terminal signals the launcher's whole group.
        os.killpg(run.process.pid, stop)
    else:
        run.process.send_signal(stop)  # a supervisor's or an operator's kill

    assert run.finish() == 0, "\n".join(run.lines[-30:])
    assert run.said(r"^procfile: stopped$")
    assert not [pid for pid in children if alive(pid)]


def test_a_process_that_dies_by_itself_still_fails_the_run(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "broken: python -c 'import sys; sys.exit(3)'\nsteady: sleep 60\n"
    )
    run = Run("-f", str(procfile), "-d", str(ROOT), "start", "--env", "/dev/null")
    assert run.finish() == 3
    assert not run.said(r"^procfile: stopped$")


def test_ctrl_c_in_a_terminal_ends_make_with_0(tmp_path):
    """Ctrl-C at a real terminal (a pty), under make, as `make run` is used.

    The terminal signals its foreground group: before, make was in it and reported
    the stop as an error ("Error 130"), or gave up at once ("Interrupt").
    """
    procfile = tmp_path / "Procfile"
    procfile.write_text("steady: sleep 60\nother: sleep 60\n")
    makefile = tmp_path / "Makefile"
    makefile.write_text(
        f"run:\n\t{sys.executable} {LAUNCHER} -f {procfile} -d {tmp_path} "
        "start --env /dev/null\n"
    )
    pid, terminal = pty.fork()
    if pid == 0:  # the child: an interactive shell on the pty, running make
        os.execvp(
            "bash",
            ["bash", "--norc", "-i", "-c", f"make -f {makefile} run; echo STATUS=$?"],
        )
    seen = bytearray()

    def read() -> str:
        while select.select([terminal], [], [], 0)[0]:
            try:
                seen.extend(os.read(terminal, 4096))
            except OSError:  # the shell has exited and the pty is closed
                break
        return seen.decode(errors="replace")

    try:
        wait_until(lambda: read().count("started (pid=") == 2, "both processes")
        os.write(terminal, b"\x03")  # Ctrl-C
        status = wait_until(
            lambda: re.search(r"STATUS=(\d+)", read()), "make's exit status"
        )
    finally:
        kill_group_quietly(pid)
        os.waitpid(pid, 0)
        os.close(terminal)
    output = seen.decode(errors="replace")
    assert status.group(1) == "0", output
    assert "procfile: stopped" in output
    assert "Error" not in output
    assert "Interrupt" not in output
