"""Helpers for tests that start real worker and server processes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from course.instruments.processes import (
    ROOT,
    child_environment,
    kill_group,
    manage_command,
)
from course.instruments.processes import start_manage as _start_manage

__all__ = [
    "ROOT",
    "child_env",
    "free_port",
    "lab_daphne",
    "manage",
    "start_daphne",
    "stop",
    "wait_until",
]

T = TypeVar("T")
# Generous on purpose: a wait ends as soon as its condition holds, so the deadline
# costs nothing on a quick machine and only a hung process ever reaches it.
WAIT_DEADLINE_S = 60.0


class _Deadline:
    """The one deadline of a wait: ``over()`` raises once it has passed."""

    def __init__(self, what: str, deadline_s: float) -> None:
        self.what, self.deadline_s = what, deadline_s
        self.end = time.monotonic() + deadline_s

    def over(self) -> None:
        if time.monotonic() > self.end:
            raise TimeoutError(f"waited {self.deadline_s:.0f} s for {self.what}")


def wait_until(
    condition: Callable[[], T | None], what: str, deadline_s: float = WAIT_DEADLINE_S
) -> T:
    """Poll ``condition`` until it returns something true, and return that.

    The one way these tests wait for another process: for the exact condition the
    test needs next, never a fixed sleep.
    """
    deadline = _Deadline(what, deadline_s)
    while not (value := condition()):
        deadline.over()
        time.sleep(0.02)
    return value


async def await_until(
    condition: Callable[[], T | None], what: str, deadline_s: float = WAIT_DEADLINE_S
) -> T:
    """``wait_until`` for a condition that the running event loop itself makes true."""
    deadline = _Deadline(what, deadline_s)
    while not (value := condition()):
        deadline.over()
        await asyncio.sleep(0.02)
    return value


def child_env() -> dict[str, str]:
    """Environment for a child process that shares this test's database and Redis."""
    return child_environment(DEBUG="true")


def manage(*args: str) -> list[str]:
    return manage_command(*args)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, process: subprocess.Popen[bytes], timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited early with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process started by these helpers (SIGTERM, then SIGKILL)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_group(process)


@contextlib.contextmanager
def lab_daphne(**env: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A daphne with the lab routes on (and ``env``), for as long as the block runs.

    The tests that use it read ``/realtime/metrics`` signed out, as the labs do.
    """
    port = free_port()
    process = start_daphne(port, env={**child_env(), "LIBRARY_LAB_ROUTES": "on", **env})
    try:
        yield port, process
    finally:
        stop(process)


def start_daphne(
    port: int, env: dict[str, str] | None = None, *, proxy_headers: bool = False
) -> subprocess.Popen[bytes]:
    """Start a daphne instance of the project on ``port`` and wait until it listens.

    ``proxy_headers`` trusts X-Forwarded-For/-Proto, as the daphnes behind the
    balancer of ``Procfile.cluster`` do.
    """
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            *(["--proxy-headers"] if proxy_headers else []),
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "config.asgi:application",
        ],
        cwd=ROOT,
        env=env or child_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, process)
    return process


def start_manage(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``manage.py ARGS`` in its own session, sharing this test's database."""
    return _start_manage(*args, env=env or child_env())
