"""A daphne with the lab routes on, for the tests that read what the labs read.

Every other process helper of the tests is the project's toolkit,
``config.processes`` (start, wait, stop), shared with the labs and the benchmarks.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

from config.processes import child_environment, free_port, start_daphne, stop

__all__ = ["lab_daphne"]


@contextlib.contextmanager
def lab_daphne(**env: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A daphne with the lab routes on (and ``env``), for as long as the block runs.

    The tests that use it read ``/realtime/metrics`` signed out, as the labs do.
    """
    port = free_port()
    process = start_daphne(port, env=child_environment(LIBRARY_LAB_ROUTES="on", **env))
    try:
        yield port, process
    finally:
        stop(process)
