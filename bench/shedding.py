"""The load-shedding benchmark: one endpoint with admission control beside one without.

Two real daphne processes of this project serve the same lab-only endpoint
(``/_lab/work``, ``LIBRARY_LAB_ROUTES=on``): each request holds one of
``capacity`` places for ``job_ms`` (``LIBRARY_LAB_WORK_CAPACITY``), so the endpoint
completes at most ``capacity / job_ms`` requests a second, like a server with a
fixed worker pool. One daphne runs the project's admission control
(``jobs.shedding``: ``capacity`` running, ``queued`` waiting, a queue budget of
``budget_ms``); the other has it switched off (``LIBRARY_ADMISSION=off``).

1. Unloaded: open-loop arrivals at half the endpoint's capacity for ``seconds``;
   the p99 of that is the reference.
2. Overloaded: open-loop arrivals at ``overload`` times capacity for ``seconds``, each
   request on its own task, whatever the earlier ones are doing.

The checks (admission side): accepted p99 ≤ 2x unloaded p99, and rejection
p99 ≤ 5 ms. Latency is measured in this process, from sending the request to the
full answer; the servers are measured one after the other, so they never compete
for the two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.common import (
    Children,
    format_table,
    markdown_page,
    percentile,
)
from config.processes import daphne_command

NAME = "shedding"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("shedding")
    group.add_argument(
        "--shedding-seconds", type=float, help="length of each phase (default 10)"
    )


@dataclass(frozen=True)
class Params:
    seconds: float
    job_ms: int = 200
    capacity: int = 4
    # No waiting places: every refusal is immediate. A queued request dropped at its
    # deadline waits its budget by design (jobs/tests/test_shedding.py).
    queued: int = 0
    budget_ms: int = 100
    overload: int = 10

    @property
    def capacity_per_s(self) -> float:
        return self.capacity * 1000 / self.job_ms

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> Params:
        seconds = getattr(options, "shedding_seconds", None)
        return cls(seconds=seconds or (3.0 if options.quick else 10.0))


def start_server(
    children: Children, name: str, params: Params, *, admission: bool
) -> str:
    """Start one daphne with the lab route; return its base URL once it answers."""
    import httpx

    env = [
        "LIBRARY_LAB_ROUTES=on",
        f"LIBRARY_LAB_WORK_CAPACITY={params.capacity}",
        f"LIBRARY_ADMISSION={'on' if admission else 'off'}",
        f"LIBRARY_ADMISSION_MAX_RUNNING={params.capacity}",
        f"LIBRARY_ADMISSION_MAX_QUEUED={params.queued}",
        f"LIBRARY_ADMISSION_QUEUE_BUDGET_MS={params.budget_ms}",
        "ALLOWED_HOSTS=127.0.0.1",
    ]

    def answers(port: int) -> bool:
        try:
            url = f"http://127.0.0.1:{port}/_lab/wait?ms=0"
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    port = children.start_server(
        name, lambda port: ["env", *env, *daphne_command(port)], ready=answers
    )
    return f"http://127.0.0.1:{port}"


async def _get(host: str, port: int, target: str) -> int:
    """One GET on its own connection (``Connection: close``); return the status.

    Plain asyncio streams rather than an HTTP client library: at 200 requests a
    second a client's own bookkeeping would show up in a 5 ms budget.
    """
    reader, writer = await asyncio.open_connection(host, port)
    try:
        request = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()
        answer = await reader.read()  # until the server closes
    finally:
        writer.close()
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


async def _open_loop(url: str, rate: float, seconds: float) -> list[tuple[int, float]]:
    """Send requests at ``rate`` per second for ``seconds``; return (status, ms)."""
    address, _, target = url.removeprefix("http://").partition("/")
    host, _, port = address.partition(":")
    answers: list[tuple[int, float]] = []

    async def one() -> None:
        began = time.perf_counter()
        try:
            status = await _get(host, int(port), "/" + target)
        except OSError:
            status = 0
        answers.append((status, (time.perf_counter() - began) * 1000))

    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    for index in range(int(rate * seconds)):
        delay = start + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    return answers


def _summary(answers: list[tuple[int, float]]) -> dict[str, Any]:
    ok = [ms for status, ms in answers if status == 200]
    shed = [ms for status, ms in answers if status == 503]
    other = len(answers) - len(ok) - len(shed)

    def p(values: list[float], share: float) -> float | None:
        return round(percentile(values, share), 1) if values else None

    return {
        "requests": len(answers),
        "accepted": len(ok),
        "rejected": len(shed),
        "errors": other,
        "accepted_p50_ms": p(ok, 50),
        "accepted_p99_ms": p(ok, 99),
        "accepted_max_ms": round(max(ok), 1) if ok else None,
        "rejected_p50_ms": p(shed, 50),
        "rejected_p99_ms": p(shed, 99),
    }


def run(children: Children, options: argparse.Namespace) -> dict[str, Any]:
    params = Params.from_options(options)
    print(
        f"  endpoint: {params.capacity} places x {params.job_ms} ms ="
        f" {params.capacity_per_s:g} requests/s; overload {params.overload}x",
        flush=True,
    )
    sides = {
        "admission": start_server(children, "daphne-admission", params, admission=True),
        "no_admission": start_server(
            children, "daphne-no-admission", params, admission=False
        ),
    }
    result: dict[str, Any] = {"params": asdict(params), "sides": {}}
    for side, base in sides.items():
        url = f"{base}/_lab/work?ms={params.job_ms}"
        print(f"  {side}: unloaded, {params.capacity_per_s / 2:g}/s", flush=True)
        unloaded = asyncio.run(
            _open_loop(url, params.capacity_per_s / 2, params.seconds)
        )
        rate = params.capacity_per_s * params.overload
        print(f"  {side}: overloaded, {rate:g}/s", flush=True)
        overloaded = asyncio.run(_open_loop(url, rate, params.seconds))
        result["sides"][side] = {
            "unloaded": _summary(unloaded),
            "overloaded": _summary(overloaded),
        }
        time.sleep(1)
    on = result["sides"]["admission"]
    unloaded_p99 = on["unloaded"]["accepted_p99_ms"]
    accepted_p99 = on["overloaded"]["accepted_p99_ms"]
    rejected_p99 = on["overloaded"]["rejected_p99_ms"]
    result["checks"] = {
        "accepted_p99_over_unloaded_p99": round(accepted_p99 / unloaded_p99, 2),
        "accepted_p99_within_2x": accepted_p99 <= 2 * unloaded_p99,
        "rejection_p99_ms": rejected_p99,
        "rejection_p99_within_5ms": rejected_p99 is not None and rejected_p99 <= 5,
    }
    print(text_report(result), flush=True)
    return result


def text_report(result: dict[str, Any]) -> str:
    rows = []
    for side, phases in result["sides"].items():
        for phase, s in phases.items():
            rows.append(
                [
                    side,
                    phase,
                    s["requests"],
                    s["accepted"],
                    s["rejected"],
                    s["errors"],
                    s["accepted_p50_ms"],
                    s["accepted_p99_ms"],
                    s["rejected_p99_ms"],
                ]
            )
    checks = result["checks"]
    table = format_table(
        [
            "side",
            "phase",
            "requests",
            "200",
            "503",
            "errors",
            "200 p50 ms",
            "200 p99 ms",
            "503 p99 ms",
        ],
        rows,
    )
    return "\n".join(
        [
            table,
            "",
            f"admission: accepted p99 / unloaded p99 ="
            f" {checks['accepted_p99_over_unloaded_p99']}"
            f" (<= 2: {'yes' if checks['accepted_p99_within_2x'] else 'NO'});"
            f" rejection p99 = {checks['rejection_p99_ms']} ms"
            f" (<= 5: {'yes' if checks['rejection_p99_within_5ms'] else 'NO'})",
        ]
    )


def markdown_report(document: dict[str, Any]) -> str:
    result = document["results"][NAME]
    p = result["params"]
    return markdown_page(
        document,
        title="Load-shedding benchmark (shedding)",
        report=text_report(result),
        show_database=False,
        details=[
            f"- endpoint: `/_lab/work`, {p['capacity']} places x {p['job_ms']} ms;"
            f" admission: {p['capacity']} running, {p['queued']} queued, budget"
            f" {p['budget_ms']} ms; phases of {p['seconds']:g} s at 0.5x and"
            f" {p['overload']}x capacity"
        ],
        note="Two daphne of the project, the same endpoint and capacity, one with"
        " `LIBRARY_ADMISSION=off`; open-loop arrivals from one httpx client; see"
        " bench/README.md.",
    )
