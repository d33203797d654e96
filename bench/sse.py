"""The server-sent events benchmark: idle streams, and push versus long polling.

One real ``daphne`` of the project serves the benchmark database; this process is
the client (httpx streaming, ``websockets``).

1. Idle streams: S streams of one branch's events (``/realtime/branches/1/events``)
   are opened on plain sockets (so the client side stays light at 10,000) and left
   idle. Measured on the daphne process with one stream open and with all S:
   resident memory (VmRSS), per added stream; its threads; and its database
   connections, sampled every 100 ms for a few seconds (descriptors of the SQLite
   file, or ``pg_stat_activity`` rows of the database on PostgreSQL). Then one
   stock correction goes to all of them: the time from its commit until the first,
   half and all of the streams had it, and how many did; a second later, idle
   again, the resident memory per stream once each has carried an event. The
   streams are closed, and the server's count of open streams must fall back to 0.
2. Delivery latency, R rounds interleaved: the time from a change to its arrival at
   a waiting client, for (a) a long poll of a job (``/realtime/jobs/<id>/wait``,
   the change is ``jobstatus_progress``), (b) the live stock WebSocket
   (``/ws/branches/1/stock/``, the change is the ``stock.update`` frame
   ``realtime.broadcast.broadcast_flush`` publishes to the branch's fan-out
   channel), and (c) the branch event stream (the change is ``stock_correct``'s
   outbox row). A long poll and an event stream see a change when the server's
   change hub next looks (every 150 ms); the socket is pushed to through the
   daphne's fan-out subscription (``realtime.fanout``). Each change lands at a
   random moment.

The daphne runs behind the real admission control (``jobs.shedding``), which
lets event streams and long polls through uncounted: they hold connections, not
workers. Targets: memory per idle stream at most 30 KiB (issue #15); database
connections with the streams open no more than without them (flat).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.common import (
    BenchError,
    Children,
    format_table,
    percentile,
)
from config.processes import daphne_command

NAME = "realtime_sse"
TARGET_KIB_PER_STREAM: Final = 30.0
HEADERS: Final = {"X-Forwarded-Proto": "https"}
BRANCH: Final = 1
SAMPLE_S: Final = 3.0


@dataclass(frozen=True)
class Params:
    streams: int
    rounds: int

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> Params:
        quick = bool(options.quick)
        return cls(
            streams=options.sse_streams or (100 if quick else 500),
            rounds=options.sse_rounds or (10 if quick else 40),
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("realtime_sse")
    group.add_argument("--sse-streams", type=int, help="idle streams (default 500)")
    group.add_argument(
        "--sse-rounds", type=int, help="latency rounds per side (default 40)"
    )


# --- the server and what it holds ---------------------------------------------


def start_daphne(children: Children) -> tuple[int, int]:
    import httpx

    def answers(port: int) -> bool:
        try:
            url = f"http://127.0.0.1:{port}/realtime/metrics"
            return httpx.get(url, headers=HEADERS, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    port = children.start_server(
        "sse-daphne",
        lambda port: [
            "env",
            "ALLOWED_HOSTS=127.0.0.1",
            # /realtime/metrics is staff only unless lab routes are on.
            "LIBRARY_LAB_ROUTES=on",
            # Every client of the benchmark comes from this one address: no share.
            "REALTIME_STREAMS_PER_CLIENT=0",
            "REALTIME_SOCKETS_PER_CLIENT=0",
            *daphne_command(port),
        ],
        ready=answers,
    )
    return port, children.processes["sse-daphne"].pid


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise BenchError("no VmRSS in /proc")


def threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def db_connections(pid: int) -> int:
    """Return the daphne's database connections (SQLite: its open files of the db)."""
    from django.db import connection

    if connection.vendor == "sqlite":
        # One descriptor of the database file per connection (-wal/-shm aside).
        name = str(connection.settings_dict["NAME"])
        files = 0
        for entry in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(entry) == name:
                    files += 1
            except OSError:
                continue
        return files
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
        row = cursor.fetchone()
    connection.close()
    return int(row[0]) if row else 0


def sample_connections(pid: int) -> list[int]:
    samples = []
    deadline = time.monotonic() + SAMPLE_S
    while time.monotonic() < deadline:
        samples.append(db_connections(pid))
        time.sleep(0.1)
    return samples


def prepare_library() -> None:
    from library.models import Book, Branch

    Branch.objects.get_or_create(pk=BRANCH, defaults={"name": "Bench", "city": "X"})
    Book.objects.get_or_create(
        pk=1, defaults={"title": "Bench", "author": "B", "branch_id": BRANCH}
    )
    Book.objects.filter(pk=1).update(on_shelf=3)


def recount() -> None:
    from library.services import stock_correct

    stock_correct(book_id=1, on_shelf=3)


async def _first_event(lines: Any) -> dict[str, str]:
    fields: dict[str, str] = {}
    async for line in lines:
        if line == "":
            if "data" in fields:
                return fields
            fields = {}
        elif ": " in line and not line.startswith(":"):
            name, value = line.split(": ", 1)
            fields[name] = value
    raise BenchError("a stream ended before its event")


class _RawStream:
    """One event stream on a plain socket: the client side costs a few hundred
    bytes and no parsing but a search for the next event's name, so 10,000 of
    them in this process measure the server, not an HTTP client library."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, path: str) -> _RawStream:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readuntil(b"\r\n"), 60)
        if b" 200 " not in status:
            raise BenchError(f"stream answered {status!r}")
        return cls(reader, writer)

    async def until(self, event: str, timeout: float) -> float:
        """Wait for the next ``event:`` of that name; return when it arrived."""
        marker = f"event: {event}\n".encode()
        await asyncio.wait_for(self.reader.readuntil(marker), timeout)
        return time.perf_counter()

    def close(self) -> None:
        self.writer.close()


async def idle_streams(port: int, pid: int, count: int) -> dict[str, Any]:
    import httpx

    base = f"http://127.0.0.1:{port}"
    path = f"/realtime/branches/{BRANCH}/events"
    before_rss = before_threads = 0
    before_db: list[int] = []
    async with httpx.AsyncClient(headers=HEADERS, timeout=60) as client:
        streams: list[_RawStream] = []
        try:
            # The baseline has one stream open, so the change hub already runs:
            # what is measured is what the other streams add.
            for index in range(count):
                if index == 1:
                    await asyncio.sleep(1.0)
                    before_rss = rss_kib(pid)
                    before_threads = threads(pid)
                    before_db = await asyncio.to_thread(sample_connections, pid)
                stream = await _RawStream.open(port, path)
                streams.append(stream)
                await stream.until("state", 60)  # the stream is up
            await asyncio.sleep(1.0)
            metrics = (await client.get(f"{base}/realtime/metrics")).json()["process"]
            open_rss = rss_kib(pid)
            open_threads = threads(pid)
            open_db = await asyncio.to_thread(sample_connections, pid)
            # One event to every stream: from its commit to each stream's receive.
            waiting = [
                asyncio.ensure_future(s.until("stock_corrected", 60)) for s in streams
            ]
            await asyncio.to_thread(recount)
            committed = time.perf_counter()
            arrivals = await asyncio.gather(*waiting, return_exceptions=True)
            delays = [
                (arrived - committed) * 1000
                for arrived in arrivals
                if isinstance(arrived, float)
            ]
            # Idle again, but each stream has now carried an event: what a stream
            # costs once it has been used, not only opened.
            await asyncio.sleep(1.0)
            event_rss = rss_kib(pid)
        finally:
            for stream in streams:
                stream.close()
        deadline = time.monotonic() + 30
        while True:
            after = (await client.get(f"{base}/realtime/metrics")).json()["process"]
            if after["open_streams"] == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    return {
        "streams": count,
        "server_open_streams": metrics["open_streams"],
        "rss_before_kib": before_rss,
        "rss_open_kib": open_rss,
        "kib_per_stream": round((open_rss - before_rss) / (count - 1), 1),
        "rss_after_event_kib": event_rss,
        "kib_per_stream_after_event": round((event_rss - before_rss) / (count - 1), 1),
        "threads_before": before_threads,
        "threads_open": open_threads,
        "db_connections_before_max": max(before_db),
        "db_connections_open_max": max(open_db),
        "db_connections_open_samples": len(open_db),
        "event_received_by": len(delays),
        "fan_out_first_ms": round(min(delays, default=float("nan")), 1),
        "fan_out_p50_ms": round(percentile(delays, 50), 1),
        "fan_out_all_ms": round(max(delays, default=float("nan")), 1),
        "open_streams_after_close": after["open_streams"],
    }


# --- delivery latency ----------------------------------------------------------


async def latency_rounds(port: int, rounds: int) -> dict[str, list[float]]:
    import httpx
    import websockets
    from channels.layers import get_channel_layer

    from jobs.models import JobStatus
    from jobs.services import jobstatus_create, jobstatus_progress
    from realtime.broadcast import update_frame
    from realtime.fanout import fanout_publish

    base = f"http://127.0.0.1:{port}"
    job = await asyncio.to_thread(
        jobstatus_create, kind="bench", name="sse-latency", params={}
    )
    version = 1
    layer = get_channel_layer()
    if layer is None:
        raise BenchError("no channel layer configured")
    found: dict[str, list[float]] = {"long_poll": [], "websocket": [], "sse": []}
    timeout = httpx.Timeout(60.0, read=60.0)
    async with (
        httpx.AsyncClient(base_url=base, headers=HEADERS, timeout=timeout) as client,
        websockets.connect(
            f"ws://127.0.0.1:{port}/ws/branches/{BRANCH}/stock/",
            origin=websockets.Origin(f"http://127.0.0.1:{port}"),
        ) as socket_,
        client.stream("GET", f"/realtime/branches/{BRANCH}/events") as stream,
    ):
        await socket_.recv()  # the snapshot
        lines = stream.aiter_lines()
        await _first_event(lines)  # the state
        for round_ in range(rounds):
            # (a) long poll: held, then the job moves at a random moment.
            wait = asyncio.ensure_future(
                client.get(f"/realtime/jobs/{job.pk}/wait?version={version}")
            )
            await asyncio.sleep(random.uniform(0.3, 0.6))
            started = time.perf_counter()
            await asyncio.to_thread(
                jobstatus_progress, job_id=job.pk, progress=round_ % 100
            )
            answer = await wait
            found["long_poll"].append((time.perf_counter() - started) * 1000)
            version = int(answer.json()["version"])
            # (b) WebSocket: the frame broadcast_flush publishes (realtime.fanout).
            await asyncio.sleep(random.uniform(0.05, 0.2))
            started = time.perf_counter()
            event = {"type": "stock.update", "branch": BRANCH, "version": round_}
            await fanout_publish(layer, [(f"branch-{BRANCH}", update_frame(event))])
            while json.loads(await socket_.recv()).get("type") != "update":
                pass
            found["websocket"].append((time.perf_counter() - started) * 1000)
            # (c) the branch event stream: an outbox row from a real correction.
            await asyncio.sleep(random.uniform(0.05, 0.2))
            started = time.perf_counter()
            await asyncio.to_thread(recount)
            await asyncio.wait_for(_first_event(lines), 30)
            found["sse"].append((time.perf_counter() - started) * 1000)
    await asyncio.to_thread(lambda: JobStatus.objects.filter(pk=job.pk).delete())
    return found


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 50), 1),
        "p99_ms": round(percentile(values, 99), 1),
        "max_ms": round(max(values), 1),
    }


def run(children: Children, options: argparse.Namespace) -> dict[str, Any]:
    params = Params.from_options(options)
    prepare_library()
    port, pid = start_daphne(children)
    print(f"  {params.streams} idle streams ...", flush=True)
    idle = asyncio.run(idle_streams(port, pid, params.streams))
    print(f"  delivery latency, {params.rounds} rounds ...", flush=True)
    latency = asyncio.run(latency_rounds(port, params.rounds))
    children.stop("sse-daphne")
    latencies = {side: summary(values) for side, values in latency.items()}
    checks = {
        "kib_per_stream_within_target": idle["kib_per_stream"] <= TARGET_KIB_PER_STREAM,
        "db_connections_flat": idle["db_connections_open_max"]
        <= idle["db_connections_before_max"],
        "every_stream_got_the_event": idle["event_received_by"] == params.streams,
        "streams_closed": idle["open_streams_after_close"] == 0,
    }
    return {
        "params": {"streams": params.streams, "rounds": params.rounds},
        "idle": idle,
        "latency": latencies,
        "checks": checks,
    }


def markdown_report(document: dict[str, Any]) -> str:
    result = document["results"][NAME]
    idle, latency = result["idle"], result["latency"]
    machine = document["machine"]
    idle_rows = [
        ["streams open (server's count)", idle["server_open_streams"]],
        [
            "RSS with 1 / all streams (KiB)",
            f"{idle['rss_before_kib']} / {idle['rss_open_kib']}",
        ],
        [
            f"KiB per added stream (target ≤ {TARGET_KIB_PER_STREAM:g})",
            idle["kib_per_stream"],
        ],
        [
            "KiB per added stream once each carried one event",
            idle.get("kib_per_stream_after_event", "-"),
        ],
        [
            "threads with 1 / all streams",
            f"{idle['threads_before']} / {idle['threads_open']}",
        ],
        [
            "DB connections, max of samples, with 1 / all streams",
            f"{idle['db_connections_before_max']} / {idle['db_connections_open_max']}",
        ],
        ["streams that got the one event", idle["event_received_by"]],
        [
            "commit -> first / half / all streams had it (ms)",
            f"{idle.get('fan_out_first_ms', '-')} / {idle.get('fan_out_p50_ms', '-')}"
            f" / {idle['fan_out_all_ms']}",
        ],
        ["open streams after the clients left", idle["open_streams_after_close"]],
    ]
    latency_rows = [
        [side, values["n"], values["p50_ms"], values["p99_ms"], values["max_ms"]]
        for side, values in latency.items()
    ]
    checks = [[name, "yes" if ok else "NO"] for name, ok in result["checks"].items()]
    return "\n".join(
        [
            "# Server-sent events benchmark (realtime_sse)",
            "",
            f"{document['date']}, {document['database']}, "
            f"{machine.get('cpus', '?')} CPUs, `{document['command']}`",
            "",
            f"## {idle['streams']} idle streams on one daphne",
            "",
            format_table(["measure", "value"], idle_rows),
            "",
            "## Delivery latency: change to client",
            "",
            format_table(["side", "n", "p50 ms", "p99 ms", "max ms"], latency_rows),
            "",
            "## Checks",
            "",
            format_table(["check", "holds"], checks),
            "",
        ]
    )
