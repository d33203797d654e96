"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from course.labs.harness.base import (
    Cell,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step
from course.labs.harness.live_http import daphne_processes
from course.labs.load_shedding.model import COLUMNS, LAB_BUDGET_MS, MODES, summarize
from course.labs.load_shedding.params import LoadSheddingParams


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


def fire(server: ShedServer, *, requests: int, job_ms: int) -> list[tuple[int, float]]:
    """Return (status, latency ms) of ``requests`` simultaneous lab requests."""
    url = f"{server.base_url}/_lab/work?ms={job_ms}"
    return asyncio.run(_simultaneous(url, requests))


@dataclass(frozen=True)
class Measurement:
    """Each mode's answers: (status, latency ms) of every simultaneous request."""

    answers: list[tuple[str, list[tuple[int, float]]]]


def measure(params: LoadSheddingParams, progress: Progress) -> Measurement:
    """Send the requests at once to a daphne per mode, behind admission control."""
    requests = params.requests
    if requests == 0:
        return Measurement([])  # no request to send: nothing to start
    concurrent = params.max_concurrent
    envs = [
        admission_env(max_running=concurrent, max_queued=requests),
        admission_env(max_running=concurrent, max_queued=params.max_queue),
    ]
    live_step(progress, 0.05, "starting two daphne behind admission control")
    answers: list[tuple[str, list[tuple[int, float]]]] = []
    with shed_servers(envs) as servers:
        for index, (mode, server) in enumerate(zip(MODES, servers, strict=True)):
            live_step(progress, 0.3 + 0.3 * index, f"{mode}: {requests} requests")
            answers.append(
                (mode, fire(server, requests=requests, job_ms=params.job_ms))
            )
    return Measurement(answers)


def tables(params: LoadSheddingParams, measured: Measurement) -> Tables:
    """Summarise each mode's answers as the model summarises its own."""
    rows: list[list[Cell]] = []
    for mode, answers in measured.answers:
        rows += summarize(mode, answers)
    return {"live_latency": table(COLUMNS, rows)}


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
