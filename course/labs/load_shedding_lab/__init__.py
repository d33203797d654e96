"""Lab for "Load Shedding": ten requests at once, with and without a queue bound.

Model part (the course's ``admission.mjs`` and its measuring script): ``requests``
arrive at the same instant at a server that runs ``max_concurrent`` jobs of
``job_ms`` at once. ``unbounded`` queues every other request; ``controlled``
queues at most ``max_queue`` and answers the rest ``503`` at once. A finished job
starts the next queued one. Latency is counted in hundred-millisecond slices
(``int(seconds * 10)``, as the script's awk does), and the rows are the lines of
``sort | uniq -c`` under ``LC_ALL=C``: status, then the space-padded slice.

Live part (``live_latency``): two real daphne processes of this project
(``config.asgi:application``) with the lab-only route ``/_lab/work`` mounted
(``LIBRARY_LAB_ROUTES=on``), each behind the real admission control
(``config.admission``) set by environment: ``max_concurrent`` running, and a queue
of ``requests`` places (unbounded: never full) or of ``max_queue``. ``requests``
simultaneous GETs of ``/_lab/work?ms=job_ms`` go to each, one connection apiece;
their status and latency are measured in this process. On a loaded machine a
slice may shift up by one, as the course warns; the statuses and counts do not.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from course.labs.harness.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.harness.live import live_step
from course.labs.harness.live_http import daphne_processes

MODES: Final = ("unbounded", "controlled")
COLUMNS: Final = ["mode", "status", "latency_slices", "count"]
# The queue budget of the lab's servers: long enough that nothing expires.
LAB_BUDGET_MS: Final = 600_000


def serve(
    requests: int, *, max_concurrent: int, max_queue: int | None, job_ms: int
) -> list[tuple[int, int]]:
    """Return (status, latency ms) per request of admission.mjs (None: unbounded)."""
    finishes: list[int] = []  # finish instants of the jobs started so far
    answers: list[tuple[int, int]] = []
    queued = 0
    for _ in range(requests):
        if len(finishes) < max_concurrent:
            finishes.append(job_ms)
            answers.append((200, job_ms))
        elif max_queue is None or queued < max_queue:
            queued += 1
            # A queued job starts when the earliest running or queued one ends.
            finishes.sort()
            start = finishes[len(finishes) - max_concurrent]
            finishes.append(start + job_ms)
            answers.append((200, start + job_ms))
        else:
            answers.append((503, 0))
    return answers


def summarize(mode: str, answers: Sequence[tuple[int, float]]) -> list[list[Cell]]:
    """Group (status, latency ms) the way ``awk | LC_ALL=C sort | uniq -c`` does."""
    counts = Counter(
        f"status={status}  latency={int(ms // 100):2d} slice" for status, ms in answers
    )
    rows: list[list[Cell]] = []
    for line in sorted(counts):
        status = int(line.split()[0].removeprefix("status="))
        slices = int(line.split("latency=")[1].split()[0])
        rows.append([mode, status, slices, counts[line]])
    return rows


def model(params: Params, progress: Progress) -> Tables:
    requests = int_param(params, "requests")
    concurrent = int_param(params, "max_concurrent")
    job_ms = int_param(params, "job_ms")
    rows: list[list[Cell]] = []
    for mode in MODES:
        progress(0.5 if mode == "controlled" else 0.0, f"{mode} server")
        limit = None if mode == "unbounded" else int_param(params, "max_queue")
        answers = serve(
            requests, max_concurrent=concurrent, max_queue=limit, job_ms=job_ms
        )
        rows += summarize(mode, [(status, float(ms)) for status, ms in answers])
    return {"latency": table(COLUMNS, rows)}


# --- live ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ShedServer:
    """A daphne of the project behind admission control, with the lab routes."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def admission_env(
    *, max_running: int, max_queued: int, budget_ms: int = LAB_BUDGET_MS, **extra: str
) -> dict[str, str]:
    """Return the environment of a lab daphne with these admission settings."""
    return {
        "LIBRARY_LAB_ROUTES": "on",
        "LIBRARY_ADMISSION": "on",
        "LIBRARY_ADMISSION_MAX_RUNNING": str(max_running),
        "LIBRARY_ADMISSION_MAX_QUEUED": str(max_queued),
        "LIBRARY_ADMISSION_QUEUE_BUDGET_MS": str(budget_ms),
        "LOG_LEVEL": "ERROR",
        **extra,
    }


@contextmanager
def shed_servers(envs: Sequence[dict[str, str]]) -> Iterator[list[ShedServer]]:
    """Start one daphne per environment (sharing this process's DB and Redis).

    They start together and are stopped with their process groups however the
    block ends.
    """

    with daphne_processes(envs) as started:
        yield [ShedServer(port, process) for port, process in started]


async def _simultaneous(url: str, count: int) -> list[tuple[int, float]]:
    """Send ``count`` GETs at once, one connection each; return (status, ms)."""
    import httpx

    clients = [httpx.AsyncClient(timeout=60) for _ in range(count)]
    warm = url.split("/_lab/")[0] + "/_lab/wait?ms=0"  # exempt: counts nothing
    try:
        # Open every connection first, so the measured requests leave together.
        await asyncio.gather(*(c.get(warm) for c in clients))
        start = asyncio.Event()

        async def one(client: httpx.AsyncClient) -> tuple[int, float]:
            await start.wait()
            began = time.perf_counter()
            response = await client.get(url)
            return response.status_code, (time.perf_counter() - began) * 1000

        tasks = [asyncio.ensure_future(one(c)) for c in clients]
        await asyncio.sleep(0.05)
        start.set()
        return list(await asyncio.gather(*tasks))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


def measure(
    server: ShedServer, *, requests: int, job_ms: int
) -> list[tuple[int, float]]:
    """Return (status, latency ms) of ``requests`` simultaneous lab requests."""
    url = f"{server.base_url}/_lab/work?ms={job_ms}"
    return asyncio.run(_simultaneous(url, requests))


def live(params: Params, progress: Progress) -> Tables:

    requests = int_param(params, "requests")
    concurrent = int_param(params, "max_concurrent")
    job_ms = int_param(params, "job_ms")
    envs = [
        admission_env(max_running=concurrent, max_queued=requests),
        admission_env(
            max_running=concurrent, max_queued=int_param(params, "max_queue")
        ),
    ]
    live_step(progress, 0.05, "starting two daphne behind admission control")
    rows: list[list[Cell]] = []
    with shed_servers(envs) as servers:
        for index, (mode, server) in enumerate(zip(MODES, servers, strict=True)):
            live_step(progress, 0.3 + 0.3 * index, f"{mode}: {requests} requests")
            rows += summarize(mode, measure(server, requests=requests, job_ms=job_ms))
    return {"live_latency": table(COLUMNS, rows)}


LAB = Lab(
    slug="load-shedding",
    title="Load Shedding",
    params=(
        Param("requests", "int", 10, "requests sent at once", minimum=1, maximum=200),
        Param(
            "max_concurrent",
            "int",
            2,
            "jobs processed at once",
            minimum=1,
            maximum=100,
        ),
        Param(
            "max_queue",
            "int",
            2,
            "jobs that may wait (controlled)",
            minimum=0,
            maximum=1000,
        ),
        Param("job_ms", "int", 300, "duration of a job (ms)", minimum=1, maximum=5000),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="latency",
            label="mode",
            values=("count",),
            title="Requests per status and latency slice",
            unit="requests",
        ),
    ),
    notes=(
        "The live part starts two real daphne behind the project's admission "
        "control and sends the requests at once to a lab-only endpoint."
    ),
)
