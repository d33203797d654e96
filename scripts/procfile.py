"""Run a Procfile under honcho, and end cleanly when the operator stops it.

`make run` and `make cluster` start their processes through this:
``python scripts/procfile.py [honcho arguments]``, e.g. ``start --env /dev/null``
or ``-f Procfile.cluster start --env /dev/null``.

honcho answers Ctrl-C (SIGINT) or SIGTERM by stopping every process, then exits
with 130 or 143, as if it had failed, and make reported the stop as "Error 143".
Here a stop the operator asked for is the run's normal end: once honcho has
stopped its processes this exits 0. A process that dies by itself still ends the
run with honcho's status, and a stop that honcho did not complete (its own status
is not the stop's 130 or 143) keeps that status.

One signal path: honcho runs in a process group of its own, so only this process
hears the operator, and passes the stop on to honcho once; honcho then sends each
process one SIGTERM (an rq worker's warm shutdown: it finishes the job in hand). In
a terminal, Ctrl-C goes to the terminal's foreground process group, which was
make's as well: make, hit by it, gave up at once ("Interrupt") while the processes
were still stopping. So this script takes the terminal's foreground in a group of
its own, as a shell does for a job: Ctrl-C reaches it alone, and make waits and
sees a clean end. The terminal is handed back before this exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from types import FrameType

# What honcho exits with after stopping on SIGINT and SIGTERM (honcho.manager).
STOPPED_BY_SIGNAL = {0, 128 + signal.SIGINT, 128 + signal.SIGTERM}
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def terminal_foreground() -> Iterator[None]:
    """Hold the terminal's foreground in a new process group while the block runs.

    Nothing happens without a terminal, or when this process is not in the
    foreground (started in the background, or by a test).
    """
    try:
        terminal = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        yield
        return
    try:
        before = os.tcgetpgrp(terminal)
    except OSError:
        before = -1
    if before != os.getpgrp():
        os.close(terminal)
        yield
        return
    # A group that changes the foreground while in the background gets SIGTTOU.
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.setpgid(0, 0)
        os.tcsetpgrp(terminal, os.getpgrp())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(terminal, before)
        signal.signal(signal.SIGTTOU, old)
        os.close(terminal)


def run(arguments: list[str]) -> int:
    """Run honcho with ``arguments``; return this script's exit status."""
    stopped: list[int] = []
    # Its own group: a signal to this process's group (the terminal's Ctrl-C, a
    # supervisor's kill of the group) reaches honcho only through stop() below.
    honcho = subprocess.Popen(
        [sys.executable, "-m", "honcho", *arguments], process_group=0
    )

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stopped:
            passed = signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM
            with contextlib.suppress(ProcessLookupError):
                honcho.send_signal(passed)
        stopped.append(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    status = honcho.wait()
    if stopped and status in STOPPED_BY_SIGNAL:
        print("procfile: stopped", flush=True)
        return 0
    return status if status >= 0 else 128 - status


def main() -> int:
    with terminal_foreground():
        return run(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
