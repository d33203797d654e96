"""Three daphnes behind a real HAProxy: one SIGKILLed mid-stream loses no live update.

The cluster of ``make cluster`` (``Procfile.cluster``), started here on free ports:
three daphnes with ``--proxy-headers``, two rq workers, two drainers that drain the
outbox and broadcast, the scheduler (its sweep relays a message whose nudge was
lost) and HAProxy with ``deploy/haproxy.cfg``. WebSocket and SSE clients follow branch 1
through the balancer while the desk issues loans through it; half way, the daphne
that serves at least one client of each kind is SIGKILLed and is *not* restarted
(``scripts/supervise.sh`` would restart it in ``make cluster``; here the point is
that the two survivors carry everyone, so they must).

What the clients do is what the real ones do:

- WebSocket (``static/js/live.js``): apply a snapshot, then only the update whose
  version is the next one; ignore an older one; on a gap ask for a new snapshot.
  A dropped socket reconnects through the balancer and starts from a new snapshot.
- SSE (``EventSource``): ids are outbox offsets; a dropped stream reconnects with
  ``Last-Event-ID`` and the server replays what came after it from the outbox.

Proved: every client ends on the true shelf state (nothing missed), no WebSocket
client applied a version twice or out of order and no SSE client was sent an id
twice or skipped one of the branch's outbox messages (nothing doubled, nothing
lost), the killed daphne's clients all reconnected to survivors, and the others
were not disturbed.

Loans and the kill never overlap: the desk issues loans one by one and the kill
happens between two of them, so no POST is ever in flight on the dying daphne. A
POST sent after the kill that HAProxy routes to the dead daphne fails to *connect*
(refused), which HAProxy retries on another server (``retry-on conn-failure``,
``redispatch``): safe, the request never reached a server. The loan form has no
idempotency key, so a 502 would be ambiguous; ``issue_loan`` settles it by the
database (the loan count) and never issues a loan twice.

A product bug this test found, now fixed: ``realtime.broadcast`` labelled an
update with the branch's stock version read when the worker delivered it, yet the
update carried only its own book's count, so a page could skip a later change for
good. Each message now carries the version and total its own change committed;
``test_an_update_labelled_with_its_own_version_carries_that_change`` pins it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import json
import os
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
import websockets
from django.db import connection
from websockets.typing import Origin

from config.processes import (
    ROOT,
    child_environment,
    free_port,
    kill,
    start_daphne,
    start_manage,
    stop,
    wait_listening,
    wait_until,
)
from library.models import Book, Branch, Loan, Member
from library.selectors.stock import branch_stock_state
from library.services import loan_issue
from messaging.models import OutboxMessage
from realtime import broadcast
from realtime.sse import BRANCH_TYPES
from tests.people import DESK_PASSWORD, desk_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

HAPROXY = "/usr/sbin/haproxy"
PASSWORD = DESK_PASSWORD
BRANCH = 1
BOOKS = 3
COPIES = 10
LOANS = 20  # of BOOKS * COPIES copies: every loan finds one on the shelf
# Opened one at a time and interleaved (ws, sse, ws, ...): ``balance leastconn``
# then gives each round of three connections to three different daphnes, so some
# daphne is bound to serve both kinds (see ``pick_victim``).
WS_CLIENTS = 4
SSE_CLIENTS = 4
# Between reconnection attempts: a backoff so a refused connect is not a hot loop.
RECONNECT_PAUSE_S = 0.05

# Client state is written on the clients' event loop thread and read by the test's
# thread (the waits and the asserts): one lock keeps each read consistent.
LOCK = threading.Lock()


@pytest.fixture
def library(redis_client) -> Branch:
    branch = Branch.objects.create(id=BRANCH, name="Central", city="Ankara")
    for n in range(1, BOOKS + 1):
        Book.objects.create(
            id=n, title=f"Book {n}", author="A", branch=branch, on_shelf=COPIES
        )
    Member.objects.create(
        id=1, first_name="Ada", last_name="L", registered_at=datetime.date(2024, 1, 1)
    )
    desk_user()
    return branch


# --- processes -------------------------------------------------------------------


def start_haproxy(
    port: int, daphne_ports: list[int], log: Path
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CLUSTER_BIND": f"127.0.0.1:{port}"}
    for n, daphne_port in enumerate(daphne_ports, start=1):
        env[f"CLUSTER_DAPHNE_{n}"] = f"127.0.0.1:{daphne_port}"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [HAPROXY, "-db", "-f", "deploy/haproxy.cfg"],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    wait_listening(port, process)
    return process


def finish(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL whatever is left of its session (rq's work-horses)."""
    stop(process)
    kill(process)


# --- clients ---------------------------------------------------------------------


@dataclass
class WsClient:
    """A live shelf page: applies a snapshot, then only the next version."""

    name: str
    served_by: list[str] = field(default_factory=list)
    version: int = -1
    total: int = 0
    books: dict[int, int] = field(default_factory=dict)
    # Every state change applied, in order: ("snapshot" | "update", version).
    applied: list[tuple[str, int]] = field(default_factory=list)
    resyncs: int = 0
    asked: int = 0  # snapshots asked for and not received yet
    stale: int = 0  # updates already reflected by a newer state (ignored)

    def connected(self, server: str) -> None:
        with LOCK:
            self.served_by.append(server)
            self.asked = 0  # a new socket: the old one's answers will never come

    def take(self, message: dict[str, Any]) -> bool:
        """Apply one frame; return True if a new snapshot must be asked for."""
        with LOCK:
            if message["type"] == "snapshot":
                self.asked = max(0, self.asked - 1)
                self.version = message["version"]
                self.total = message["total"]
                self.books = {b["id"]: b["on_shelf"] for b in message["books"]}
                self.applied.append(("snapshot", self.version))
                return False
            if message["type"] != "update":
                return False
            if message["version"] <= self.version:
                self.stale += 1
                return False
            if message["version"] != self.version + 1:
                self.resyncs += 1
                self.asked += 1
                return True
            self.version = message["version"]
            self.total = message["total"]
            self.books[message["book"]] = message["on_shelf"]
            self.applied.append(("update", self.version))
            return False

    def state(self) -> dict[str, Any]:
        with LOCK:
            books = {str(pk): n for pk, n in sorted(self.books.items())}
            return {"version": self.version, "total": self.total, "books": books}

    def settled_at(self, version: int, total: int) -> bool:
        """On ``version`` with no snapshot pending: nothing can change it any more."""
        with LOCK:
            return (self.version, self.total, self.asked) == (version, total, 0)


@dataclass
class SseClient:
    """An ``EventSource`` on the branch's events: resumes with ``Last-Event-ID``."""

    name: str
    served_by: list[str] = field(default_factory=list)
    first_id: int | None = None  # the ``state`` event's id: the log's head then
    last_id: int | None = None
    books: dict[int, int] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)  # the change events applied
    repeated: list[int] = field(default_factory=list)  # ids sent again (none due)
    others: list[str] = field(default_factory=list)  # resets, refusals (none due)

    def take(self, fields: dict[str, str]) -> None:
        event, data = fields.get("event"), json.loads(fields["data"])
        with LOCK:
            event_id = int(fields["id"])
            if event == "state":
                self.books = {int(pk): n for pk, n in data["books"].items()}
                self.last_id = event_id
                if self.first_id is None:
                    self.first_id = event_id
            elif event in BRANCH_TYPES:
                if self.last_id is not None and event_id <= self.last_id:
                    self.repeated.append(event_id)
                    return
                self.ids.append(event_id)
                self.books[data["book_id"]] = data["on_shelf"]
                self.last_id = event_id
            else:
                self.others.append(f"{event}: {data}")

    def state(self) -> dict[str, Any]:
        with LOCK:
            books = {str(pk): n for pk, n in sorted(self.books.items())}
            return {"total": sum(self.books.values()), "books": books}


async def follow_ws(client: WsClient, base: str) -> None:
    url = base.replace("http://", "ws://") + f"/ws/branches/{BRANCH}/stock/"
    while True:
        try:
            # The Origin must match the Host, which HAProxy passes on unchanged.
            async with websockets.connect(
                url, origin=Origin(base), open_timeout=10
            ) as socket:
                assert socket.response is not None
                client.connected(socket.response.headers["X-Served-By"])
                async for raw in socket:
                    if client.take(json.loads(raw)):
                        await socket.send('{"action":"snapshot"}')
        except (websockets.ConnectionClosed, websockets.InvalidHandshake, OSError):
            pass  # the daphne died under it (or was refused): reconnect, as live.js
        await asyncio.sleep(RECONNECT_PAUSE_S)


async def follow_sse(client: SseClient, base: str) -> None:
    path = f"/realtime/branches/{BRANCH}/events"
    # No read timeout: the stream is quiet between events and heartbeats.
    timeout = httpx.Timeout(10.0, read=None)
    async with httpx.AsyncClient(base_url=base, timeout=timeout) as http:
        while True:
            with LOCK:
                last_id = client.last_id
            headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
            try:
                async with http.stream("GET", path, headers=headers) as response:
                    if response.status_code != 200:
                        with LOCK:
                            client.others.append(f"HTTP {response.status_code}")
                        continue
                    with LOCK:
                        client.served_by.append(response.headers["X-Served-By"])
                    fields: dict[str, str] = {}
                    async for line in response.aiter_lines():
                        if line == "":
                            if "data" in fields:
                                client.take(fields)
                            fields = {}
                        elif not line.startswith(":") and ": " in line:
                            key, value = line.split(": ", 1)
                            fields[key] = value
            except httpx.HTTPError:
                pass  # the stream was cut (its daphne died): resume from last_id
            await asyncio.sleep(RECONNECT_PAUSE_S)


class ClientLoop:
    """An event loop on its own thread, running the clients while the test waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.tasks: list[concurrent.futures.Future[None]] = []

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def check(self) -> None:
        """Raise a client's own error: a client that crashed must not look slow."""
        for task in self.tasks:
            if task.done() and not task.cancelled():
                task.result()
                raise AssertionError("a client returned, yet it follows forever")

    def close(self) -> None:
        async def cancel_all() -> None:
            running = [
                t for t in asyncio.all_tasks() if t is not asyncio.current_task()
            ]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def connect(clients: ClientLoop, client: WsClient | SseClient, base: str) -> None:
    """Start following with ``client``; return once it holds its first state."""
    if isinstance(client, WsClient):
        clients.spawn(follow_ws(client, base))
    else:
        clients.spawn(follow_sse(client, base))

    def has_state() -> bool:
        clients.check()
        return bool(client.state()["books"])

    wait_until(has_state, f"{client.name}'s first state")


# --- the desk --------------------------------------------------------------------


def sign_in(desk: httpx.Client) -> None:
    desk.get("/accounts/login/")
    login = desk.post(
        "/accounts/login/",
        data={
            "login": "desk",
            "password": PASSWORD,
            "csrfmiddlewaretoken": desk.cookies["csrftoken"],
        },
        headers={"Referer": f"{desk.base_url}accounts/login/"},
    )
    assert login.status_code == 302, login.text[:300]
    desk.get("/loans/issue/")


def issue_loan(desk: httpx.Client, book_id: int, bad_gateways: list[int]) -> None:
    """Issue one loan with the real form; a 502 is settled by the database.

    The form has no idempotency key: a POST answered 502 may or may not have been
    applied (HAProxy does not retry a POST once sent). The loan count says which:
    retried only if no loan was made, so a loan is never issued twice.
    """
    before = Loan.objects.count()
    while True:
        answer = desk.post(
            "/loans/issue/",
            data={
                "book_id": book_id,
                "member_id": 1,
                "csrfmiddlewaretoken": desk.cookies["csrftoken"],
            },
            headers={"Referer": f"{desk.base_url}loans/issue/"},
        )
        if answer.status_code == 303:
            return
        assert answer.status_code in (502, 503), answer.text[:500]
        bad_gateways.append(answer.status_code)
        if Loan.objects.count() > before:
            return  # applied before its daphne died: done, not again


# --- the test ---------------------------------------------------------------------


def pick_victim(ws: list[WsClient], sse: list[SseClient]) -> str:
    """A daphne that serves at least one WebSocket and one SSE client."""
    with LOCK:
        ws_on = {c.served_by[0] for c in ws}
        sse_on = {c.served_by[0] for c in sse}
    both = sorted(ws_on & sse_on)
    assert both, f"no daphne serves both kinds: ws {ws_on}, sse {sse_on}"
    return both[0]


def branch_offsets(after: int) -> list[int]:
    """The branch's change messages in the outbox after ``after``: what SSE sends."""
    return list(
        OutboxMessage.objects.filter(
            id__gt=after, type__in=BRANCH_TYPES, body__branch_id=BRANCH
        )
        .order_by("id")
        .values_list("id", flat=True)
    )


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="the cluster's processes share one PostgreSQL database",
)
def test_a_sigkilled_daphne_loses_and_doubles_no_live_update(library, tmp_path):
    daphne_ports = [free_port() for _ in range(3)]
    names = [f"d{n}" for n in range(1, 4)]  # HAProxy's server names (X-Served-By)
    balancer_port = free_port()
    base = f"http://127.0.0.1:{balancer_port}"
    env = {**child_environment(), "LOG_LEVEL": "WARNING"}
    processes: list[subprocess.Popen[bytes]] = []
    clients: ClientLoop | None = None
    try:
        daphnes = {
            name: start_daphne(port, env, proxy_headers=True)
            for name, port in zip(names, daphne_ports, strict=True)
        }
        processes += daphnes.values()
        processes += [start_manage("rqworker", "default", "messaging", env=env)]
        processes += [start_manage("rqworker", "default", "messaging", env=env)]
        processes += [start_manage("drainer", env=env) for _ in range(2)]
        processes += [start_manage("scheduler", env=env)]
        processes.append(
            start_haproxy(balancer_port, daphne_ports, tmp_path / "haproxy.log")
        )

        with httpx.Client(base_url=base, timeout=30) as desk:
            sign_in(desk)  # before the clients, so leastconn counts only theirs

            clients = ClientLoop()
            ws = [WsClient(f"ws{n}") for n in range(WS_CLIENTS)]
            sse = [SseClient(f"sse{n}") for n in range(SSE_CLIENTS)]
            everyone: list[WsClient | SseClient] = [*ws, *sse]
            # One at a time, each connected (and holding its connection) before
            # the next, so leastconn sees every open connection when it picks.
            for n in range(max(WS_CLIENTS, SSE_CLIENTS)):
                for group in (ws, sse):
                    if n < len(group):
                        connect(clients, group[n], base)
            with LOCK:
                first = {c.name: c.served_by[0] for c in everyone}
            assert set(first.values()) == set(names), first  # all three in use
            victim = pick_victim(ws, sse)
            on_victim = {name for name, server in first.items() if server == victim}

            bad_gateways: list[int] = []
            for n in range(LOANS):
                if n == LOANS // 2:
                    # Between two loans: no POST is in flight on the victim.
                    os.kill(daphnes[victim].pid, signal.SIGKILL)
                    daphnes[victim].wait(timeout=10)
                issue_loan(desk, n % BOOKS + 1, bad_gateways)

        assert Loan.objects.count() == LOANS
        truth = branch_stock_state(BRANCH)
        assert truth["version"] == LOANS
        expected_total = BOOKS * COPIES - LOANS
        assert truth["total"] == expected_total

        def caught_up() -> bool:
            assert clients is not None
            clients.check()
            # WebSocket pages: on the final version and total with no snapshot on
            # its way; their per-book counts are compared below (see the end).
            shelf = {"total": truth["total"], "books": truth["books"]}
            return all(
                c.settled_at(truth["version"], truth["total"]) for c in ws
            ) and all(c.state() == shelf for c in sse)

        try:
            wait_until(caught_up, "every client on the true shelf state")
        except TimeoutError as error:
            states = {c.name: c.state() for c in everyone}
            raise AssertionError(f"{error}: truth {truth}, clients {states}") from None

        with LOCK:
            for page in ws:
                # Nothing applied twice or out of order: each update is the version
                # after the state before it; a snapshot never goes back.
                steps = zip(page.applied, page.applied[1:], strict=False)
                for (_, before), (step, version) in steps:
                    if step == "update":
                        assert version == before + 1, (page.name, page.applied)
                    else:
                        assert version >= before, (page.name, page.applied)
            for stream in sse:
                assert stream.first_id is not None
                # Sent once each, in order, every one of the branch's messages
                # since the client's start: no gap across the reconnection.
                assert stream.repeated == [], (stream.name, stream.repeated)
                assert stream.others == [], (stream.name, stream.others)
                assert stream.ids == branch_offsets(stream.first_id), stream.name
                assert len(stream.ids) == LOANS, stream.name
            for client in everyone:
                if client.name in on_victim:
                    # Cut by the kill and back through the balancer, on a survivor.
                    assert len(client.served_by) >= 2, (client.name, client.served_by)
                    assert victim not in client.served_by[1:], client.served_by
                else:
                    # The survivors' clients were never disturbed.
                    assert client.served_by == [first[client.name]], client.served_by
            reconnected = Counter(c.served_by[-1] for c in everyone)
        assert victim not in reconnected
        # No POST overlapped the kill, so none can have reached the dying daphne:
        # the ones after it that HAProxy sent there were refused and redispatched.
        assert bad_gateways == []
        survivors = [d for name, d in daphnes.items() if name != victim]
        assert all(d.poll() is None for d in survivors)

        # Last, each page's per-book counts: a page on the final version ignores
        # every update from now on, so a wrong count here would stay wrong. Each
        # update carries its own version's change (the bug this test found:
        # test_an_update_labelled_with_its_own_version_carries_that_change).
        wrong = {p.name: p.state() for p in ws if p.state()["books"] != truth["books"]}
        assert wrong == {}, f"pages {wrong}, truth {truth}"
    finally:
        if clients is not None:
            clients.close()
        for process in reversed(processes):
            finish(process)


def test_an_update_labelled_with_its_own_version_carries_that_change(library):
    """The bug the cluster test ran into, without a cluster: deterministic.

    A page takes a snapshot at version 1. Loan 2 (another book) commits before the
    worker delivers loan 1's message. ``broadcast_branch_stock`` reads the branch's
    state then, so loan 1's update said version 2 with book 1's count, and loan
    2's said version 2 too: the page applied the first and ignored the second, and
    book 2's loan was never shown. Now each message carries the version and total
    its own change committed: the updates are versions 1 (the page has it) and 2
    (book 2's loan), and the page ends on the true state.
    """
    loan_issue(book_id=1, member_id=1)
    state = branch_stock_state(BRANCH)  # the page connects: a snapshot at version 1
    page = WsClient("page")
    page.take(
        {
            "type": "snapshot",
            "version": state["version"],
            "total": state["total"],
            "books": [
                {"id": int(pk), "on_shelf": n} for pk, n in state["books"].items()
            ],
        }
    )
    loan_issue(book_id=2, member_id=1)
    sent: list[tuple[str, dict[str, Any]]] = []
    with mock.patch.object(
        broadcast, "broadcasts_send", lambda _, events: sent.extend(events)
    ):
        # As one worker batch does, in offset order (autocommit: queued at once).
        for message in OutboxMessage.objects.order_by("id"):
            broadcast.broadcast_branch_stock(message)
        broadcast.broadcast_flush()
    assert [event["version"] for _, event in sent] == [1, 2]
    for _, event in sent:
        page.take({**event, "type": "update"})
    truth = branch_stock_state(BRANCH)
    assert page.state() == {key: truth[key] for key in ("version", "total", "books")}
