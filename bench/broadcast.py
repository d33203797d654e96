"""The broadcast benchmark: a loan's stock update fanned out to C WebSocket clients.

Setup: two daphne processes of the project (the Redis channel layer), C WebSocket
clients (the ``websockets`` library) split evenly between them, all on branch 1's
live stock socket; and, in the same event loop, C Redis pub/sub subscribers on one
channel: the anchor. Several client counts (``--broadcast-clients 1000,2000``) are
measured one after the other on the same two daphnes.

Each round has three sides, one after the other, so the machine's load hits all:

1. **broadcast**, the path a loan's update takes: a loan is issued through
   ``library.services.loan_issue`` and the messaging drain runs in this process
   (``messaging_drain``), as an rq worker would run it. The drain's
   ``broadcast_flush`` sends the update through
   ``realtime.broadcast.broadcasts_send`` (one ``PUBLISH`` of the frame to the
   branch's fan-out channel, ``realtime.fanout``); a wrapper here notes the
   wall-clock time just before that send.
2. **group_send**, the path broadcasts took before the fan-out (and still take on
   channels' in-process layer): the same kind of update sent with the channel
   layer's ``group_send``, which the consumers forward one by one. Not a target: it
   shows what the fan-out saves, measured beside it.
3. **baseline**: one ``PUBLISH`` of a timestamped message to the subscribers'
   channel.

Delivery time of a client = its receive time minus the send time (same machine,
same clock). A client that has not seen the round's version within ``TIMEOUT_S``
is a drop. Also reported: the time from the loan's commit to the last client
(which adds the drain), and the two daphnes' CPU time while each side's rounds
were delivered (ms per round; the baseline's is what the daphnes do meanwhile
anyway: presence beats, idle sockets).

Target (issue 27): p99 of the broadcast <= 2 x the baseline's p99, 0 drops.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import json
import time
from dataclasses import dataclass, field
from typing import Any

from bench.common import (
    BenchError,
    Children,
    format_table,
    markdown_page,
    percentile,
    process_cpu_s,
)
from config.processes import daphne_command

NAME = "broadcast"
BRANCH = 1
TIMEOUT_S = 5.0
TARGET_FACTOR = 2.0
# Idle stretches: longer than redis-py's 5 s read timeout and channels-redis's 5 s
# blocking pop together, the gap that once killed idle consumers.
IDLE_EVERY = 10
BASELINE_CHANNEL = "bench:broadcast:baseline"
# Versions of the group-send side's updates: far above any loan's.
GROUP_VERSIONS = 1_000_000
# Handshakes in flight while the clients connect.
CONNECT_AT_ONCE = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("broadcast")
    group.add_argument(
        "--broadcast-clients",
        type=str,
        default=None,
        help="WebSocket clients and Redis subscribers; several, comma-separated, are"
        " measured one after the other on the same daphnes (default 200, quick 40)",
    )
    group.add_argument(
        "--broadcast-rounds",
        type=int,
        default=None,
        help="loans broadcast (default 30, quick 5)",
    )
    group.add_argument(
        "--broadcast-idle-s",
        type=float,
        default=None,
        help=f"silence after every {IDLE_EVERY} rounds (default 0; 12 holds the "
        "sockets idle past the 10 s that once killed consumers)",
    )


@dataclass
class Params:
    clients: int
    rounds: int
    idle_s: float = 0.0
    first_loan: int = 0  # index of this measurement's first book and member


def counts_from_options(options: argparse.Namespace) -> list[int]:
    text = options.broadcast_clients or ("40" if options.quick else "200")
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise BenchError(f"broadcast: bad --broadcast-clients {text!r}") from None
    if min(counts) < 2:
        raise BenchError("broadcast: at least 2 clients")
    return counts


def rounds_from_options(options: argparse.Namespace) -> int:
    rounds = int(options.broadcast_rounds or (5 if options.quick else 30))
    if rounds < 1:
        raise BenchError("broadcast: at least 1 round")
    return rounds


@dataclass
class Side:
    """Delivery times (ms) and drops of one side, over all rounds."""

    delays_ms: list[float] = field(default_factory=list)
    drops: int = 0
    per_round_p99_ms: list[float] = field(default_factory=list)
    # The two daphnes' CPU while this side's rounds were delivered.
    daphne_cpu_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        rounds = len(self.per_round_p99_ms) or 1
        return {
            "deliveries": len(self.delays_ms),
            "drops": self.drops,
            "p50_ms": round(percentile(self.delays_ms, 50), 2),
            "p99_ms": round(percentile(self.delays_ms, 99), 2),
            "max_ms": round(max(self.delays_ms, default=float("nan")), 2),
            "daphne_cpu_ms_per_round": round(self.daphne_cpu_s * 1000 / rounds, 1),
        }


def start_daphne(children: Children, name: str) -> int:
    return children.start_server(
        name,
        lambda port: [
            "env",
            "ALLOWED_HOSTS=127.0.0.1",
            "SECURE_SSL_REDIRECT=false",
            # Every client of the benchmark comes from this one address: no share.
            "REALTIME_STREAMS_PER_CLIENT=0",
            "REALTIME_SOCKETS_PER_CLIENT=0",
            *daphne_command(port),
        ],
    )


def create_library(rounds: int) -> None:
    from library.models import Book, Branch, Member

    branch = Branch.objects.create(id=BRANCH, name="Bench", city="Ankara")
    Book.objects.bulk_create(
        Book(title=f"Broadcast {n}", author="Bench", branch=branch, on_shelf=3)
        for n in range(rounds)
    )
    Member.objects.bulk_create(
        Member(
            first_name="M", last_name=str(n), registered_at=datetime.date(2024, 1, 1)
        )
        for n in range(rounds)
    )


class SendClock:
    """Wrap ``broadcasts_send`` so each send's wall-clock start is recorded."""

    def __init__(self) -> None:
        self.sent_at: list[float] = []

    def install(self) -> None:
        from realtime import broadcast

        original = broadcast.broadcasts_send

        def timed(layer: Any, messages: Any) -> None:
            self.sent_at.append(time.time())
            original(layer, messages)

        # broadcast_flush looks the name up in its module: patch it there.
        setattr(broadcast, "broadcasts_send", timed)  # noqa: B010


def issue_and_drain(book_id: int, member_id: int) -> tuple[float, int]:
    """Issue a loan and drain it here; return (commit time, the branch version)."""
    from library.models import Branch
    from library.services import loan_issue
    from messaging.services import messaging_drain

    loan_issue(book_id=book_id, member_id=member_id)
    committed = time.time()
    messaging_drain(owner="bench-broadcast")
    version = Branch.objects.values_list("stock_version", flat=True).get(pk=BRANCH)
    return committed, int(version)


async def run_async(
    params: Params, ports: list[int], daphne_pids: list[int]
) -> dict[str, Any]:
    import redis.asyncio as aioredis
    import websockets
    from channels.layers import get_channel_layer
    from django.conf import settings
    from websockets.typing import Origin

    from library.models import Book, Member

    book_ids = await asyncio.to_thread(
        lambda: list(Book.objects.order_by("id").values_list("id", flat=True))
    )
    member_ids = await asyncio.to_thread(
        lambda: list(Member.objects.order_by("id").values_list("id", flat=True))
    )
    clock = SendClock()
    clock.install()

    # Arrival times per client: {version: receive time}.
    ws_seen: list[dict[int, float]] = [{} for _ in range(params.clients)]
    sub_seen: list[dict[int, float]] = [{} for _ in range(params.clients)]

    async def connect(index: int) -> Any:
        port = ports[index % len(ports)]
        socket_ = await websockets.connect(
            f"ws://127.0.0.1:{port}/ws/branches/{BRANCH}/stock/",
            origin=Origin(f"http://127.0.0.1:{port}"),
            max_queue=None,
        )
        snapshot = json.loads(await socket_.recv())
        if snapshot.get("type") != "snapshot":
            raise BenchError(f"client {index}: expected a snapshot, got {snapshot}")
        return socket_

    sockets: list[Any] = []
    for first in range(0, params.clients, CONNECT_AT_ONCE):
        last = min(first + CONNECT_AT_ONCE, params.clients)
        sockets += await asyncio.gather(*(connect(i) for i in range(first, last)))

    async def ws_reader(index: int) -> None:
        async for raw in sockets[index]:
            now = time.time()
            message = json.loads(raw)
            if message.get("type") == "update":
                ws_seen[index].setdefault(int(message["version"]), now)

    # One connection per subscriber, and one to publish on.
    client = aioredis.Redis.from_url(
        settings.REDIS_URL, max_connections=params.clients + 8
    )
    pubsubs = []
    for _ in range(params.clients):
        pubsub = client.pubsub()
        await pubsub.subscribe(BASELINE_CHANNEL)
        pubsubs.append(pubsub)

    async def sub_reader(index: int) -> None:
        async for message in pubsubs[index].listen():
            now = time.time()
            if message.get("type") == "message":
                body = json.loads(message["data"])
                sub_seen[index].setdefault(int(body["round"]), now)

    readers = [asyncio.create_task(ws_reader(i)) for i in range(params.clients)]
    readers += [asyncio.create_task(sub_reader(i)) for i in range(params.clients)]
    await asyncio.sleep(0.5)  # every subscription confirmed before round 1

    def daphne_cpu_s() -> float:
        return sum(process_cpu_s(pid) for pid in daphne_pids)

    def record(
        side: Side, seen: list[dict[int, float]], key: int, sent: float, cpu: float
    ) -> list[float]:
        arrivals = [s[key] for s in seen if key in s]
        side.drops += params.clients - len(arrivals)
        delays = [(t - sent) * 1000 for t in arrivals]
        side.delays_ms += delays
        side.per_round_p99_ms.append(round(percentile(delays, 99), 2))
        side.daphne_cpu_s += daphne_cpu_s() - cpu
        return arrivals

    layer = get_channel_layer()
    broadcast, group, baseline = Side(), Side(), Side()
    commit_to_last: list[float] = []
    started = time.monotonic()
    # This process reads every side's frames: a collection of its own heap (thousands
    # of sockets) inside a timed window would be charged to whichever side was in
    # flight. The collector runs between rounds instead, outside every window.
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        for round_ in range(params.rounds):
            # The broadcast of a loan (the fan-out: one PUBLISH, one frame).
            cpu = daphne_cpu_s()
            loan = params.first_loan + round_
            committed, version = await asyncio.to_thread(
                issue_and_drain, book_ids[loan], member_ids[loan]
            )
            sent = clock.sent_at[-1]
            await wait_for(lambda v=version: all(v in s for s in ws_seen))
            arrivals = record(broadcast, ws_seen, version, sent, cpu)
            if arrivals:
                commit_to_last.append((max(arrivals) - committed) * 1000)

            # The same update as a group message of the channel layer, the path
            # broadcasts took before the fan-out (and still take on the in-process
            # layer); a version of its own, never a loan's.
            key = GROUP_VERSIONS + params.first_loan + round_
            cpu, sent = daphne_cpu_s(), time.time()
            await layer.group_send(
                f"branch-{BRANCH}",
                {"type": "stock.update", "branch": BRANCH, "version": key, "total": 0},
            )
            await wait_for(lambda k=key: all(k in s for s in ws_seen))
            record(group, ws_seen, key, sent, cpu)

            # The baseline: one PUBLISH to as many subscribers.
            cpu, published = daphne_cpu_s(), time.time()
            await client.publish(
                BASELINE_CHANNEL, json.dumps({"round": round_, "at": published})
            )
            await wait_for(lambda r=round_: all(r in s for s in sub_seen))
            record(baseline, sub_seen, round_, published, cpu)
            gc.collect()
            idle = params.idle_s if (round_ + 1) % IDLE_EVERY == 0 else 0.05
            await asyncio.sleep(idle)
    finally:
        gc.enable()
        gc.unfreeze()
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for socket_ in sockets:
            await socket_.close()
        for pubsub in pubsubs:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
        await client.aclose()
    return {
        "held_s": round(time.monotonic() - started, 1),
        "broadcast": broadcast.summary()
        | {"per_round_p99_ms": broadcast.per_round_p99_ms},
        "group_send": group.summary() | {"per_round_p99_ms": group.per_round_p99_ms},
        "baseline": baseline.summary()
        | {"per_round_p99_ms": baseline.per_round_p99_ms},
        "commit_to_last_client_ms": {
            "p50": round(percentile(commit_to_last, 50), 1),
            "max": round(max(commit_to_last, default=float("nan")), 1),
        },
    }


async def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.002)


def run(children: Children, options: argparse.Namespace) -> dict[str, Any]:
    counts, rounds = counts_from_options(options), rounds_from_options(options)
    idle_s = float(options.broadcast_idle_s or 0.0)
    create_library(rounds * len(counts))
    print(
        f"  starting 2 daphne; {'/'.join(map(str, counts))} clients,"
        f" {rounds} loans each",
        flush=True,
    )
    ports = [start_daphne(children, f"daphne-ws-{n}") for n in (1, 2)]
    pids = [children.processes[f"daphne-ws-{n}"].pid for n in (1, 2)]
    runs = []
    try:
        for index, clients in enumerate(counts):
            params = Params(clients, rounds, idle_s, first_loan=index * rounds)
            runs.append(measure(params, ports, pids))
            print(text_report(runs[-1]), flush=True)
    finally:
        children.check_alive()
        for n in (1, 2):
            children.stop(f"daphne-ws-{n}")
    tracebacks = sum(
        children.log_text(f"daphne-ws-{n}").count("Traceback") for n in (1, 2)
    )
    result = {
        "params": {
            "clients": counts,
            "rounds": rounds,
            "instances": 2,
            "idle_s": idle_s,
        },
        "runs": runs,
        "daphne_tracebacks": {
            "target": "== 0",
            "measured": tracebacks,
            "met": tracebacks == 0,
        },
    }
    return result


def measure(params: Params, ports: list[int], pids: list[int]) -> dict[str, Any]:
    """Connect ``params.clients`` of each kind, run the rounds, check the targets."""
    from realtime.accounting import counters_read

    group = f"branch-{BRANCH}"
    before = counters_read([group])[group]
    measured = asyncio.run(run_async(params, ports, pids))
    after = counters_read([group])[group]
    counters = {name: after[name] - before[name] for name in after}
    base_p99 = measured["baseline"]["p99_ms"]
    limit = TARGET_FACTOR * base_p99
    p99 = measured["broadcast"]["p99_ms"]
    drops = measured["broadcast"]["drops"]
    frames = measured["broadcast"]["deliveries"] + measured["group_send"]["deliveries"]
    return {
        "clients": params.clients,
        "rounds": params.rounds,
        "idle_s": params.idle_s,
        **measured,
        "server_counters": counters,
        "targets": {
            "broadcast_p99_ms": {
                "target": f"<= {TARGET_FACTOR:g} x {base_p99} = {limit:.2f}",
                "measured": p99,
                "met": p99 <= limit,
            },
            "drops": {"target": "== 0", "measured": drops, "met": drops == 0},
            "delivery_counter": {
                "target": f"== {frames} frames received (both daphne sides)",
                "measured": counters["deliveries"],
                "met": counters["deliveries"] == frames,
            },
        },
    }


def text_report(result: dict[str, Any]) -> str:
    rows = []
    base_p99 = result["baseline"]["p99_ms"]
    for side in ("broadcast", "group_send", "baseline"):
        s = result.get(side)
        if s is None:  # a result written before the group-send side existed
            continue
        rows.append(
            [
                side,
                s["deliveries"],
                s["drops"],
                s["p50_ms"],
                s["p99_ms"],
                s["max_ms"],
                f"{s['p99_ms'] / base_p99:.2f}x",
                s.get("daphne_cpu_ms_per_round", "-"),
            ]
        )
    table = format_table(
        [
            "side",
            "deliveries",
            "drops",
            "p50 ms",
            "p99 ms",
            "max ms",
            "p99/baseline",
            "daphne CPU ms/round",
        ],
        rows,
    )
    targets = "\n".join(
        f"{name}: {t['target']}; measured {t['measured']}: "
        + ("met" if t["met"] else "NOT met")
        for name, t in result["targets"].items()
    )
    counters = result["server_counters"]
    commit = result["commit_to_last_client_ms"]
    return "\n".join(
        [
            f"{result['clients']} clients on 2 daphne, "
            f"{result['rounds']} loans, held {result.get('held_s', '?')} s"
            f" (idle {result.get('idle_s', 0):g} s after every"
            f" {IDLE_EVERY} rounds)",
            table,
            f"loan commit -> last client: p50 {commit['p50']} ms,"
            f" max {commit['max']} ms (includes the drain)",
            f"server counters for branch-{BRANCH}: {counters['broadcasts']} broadcasts,"
            f" {counters['deliveries']} deliveries",
            targets,
        ]
    )


def full_report(result: dict[str, Any]) -> str:
    tracebacks = result["daphne_tracebacks"]
    return "\n\n".join(
        [
            *(text_report(run) for run in result["runs"]),
            f"daphne tracebacks: {tracebacks['target']}; measured"
            f" {tracebacks['measured']}: "
            + ("met" if tracebacks["met"] else "NOT met"),
        ]
    )


def markdown_report(document: dict[str, Any]) -> str:
    return markdown_page(
        document,
        title="Broadcast benchmark (broadcast)",
        report=full_report(document["results"][NAME]),
        note="Delivery time: from the moment `broadcast_flush` starts its send (the"
        " group_send side's `group_send`, the baseline's PUBLISH) to a client's"
        " receive, wall clock, one machine. The three sides alternate round by"
        " round in one event loop. See bench/README.md.",
    )
