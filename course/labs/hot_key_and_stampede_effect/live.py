"""The live part of the hot-key lab: a burst of real HTTP requests on one cold key at
real daphne processes, origin calls counted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import httpx
from django.conf import settings

from config.processes import WaitTimeout, wait_until
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
    table,
)
from course.labs.harness.live import live_step
from course.labs.harness.live_http import (
    Counters,
    Daphne,
    client_for,
    counters,
    counters_delta,
    counters_settled,
    daphnes,
    percentile,
    request_headers,
    server_cold,
)
from course.labs.hot_key_and_stampede_effect.params import HotKeyParams
from library.models import Book

# --- live part: a burst of real HTTP requests on one cold key -----------------------

LIVE_NAMESPACES = ("book", "stock")
SWR_MARGIN_S = 0.5  # past the branch page's fresh window, well inside its stale one
REFRESH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class BurstResult:
    statuses: list[int]
    latencies_ms: list[float]


def burst(targets: list[tuple[str, dict[str, str]]]) -> BurstResult:
    """GET every (url, headers) at once, one connection each; return what came back.

    The requests run on an event loop of their own on a short-lived thread, so the
    caller may itself be inside a running loop (the course's web runner).
    """

    async def main() -> BurstResult:
        limits = httpx.Limits(max_connections=len(targets), max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=60.0, limits=limits) as client:

            async def one(url: str, headers: dict[str, str]) -> tuple[int, float]:
                started = time.perf_counter()
                response = await client.get(url, headers=headers)
                return response.status_code, (time.perf_counter() - started) * 1000

            answers = await asyncio.gather(*(one(u, h) for u, h in targets))
        return BurstResult([a[0] for a in answers], [a[1] for a in answers])

    box: list[BurstResult] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            box.append(asyncio.run(main()))
        except BaseException as error:  # re-raised on the caller's thread below
            errors.append(error)

    worker = threading.Thread(target=target, name="hot-key-burst")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    return box[0]


@dataclass(frozen=True)
class Burst:
    """One burst: where it went, what the client saw, what the servers counted."""

    strategy: str
    page: str
    latencies_ms: list[float]
    counts: dict[str, int]  # the servers' counters of the page's namespace


@dataclass(frozen=True)
class Measurement:
    bursts: list[Burst]


def measure(params: HotKeyParams, progress: Progress) -> Measurement:
    """Send ``requests`` simultaneous GETs of one cold page over two daphne each.

    Four daphne processes start on this database and Redis, two with the cache
    switched off (``LIBRARY_CACHE=off``) and two with it on. Each burst alternates
    its requests between the two instances of its side, so the processes compete
    for the key through Redis, not only threads inside one process.

    1. ``plain``: the book page on the uncached pair. The application's cached
       reads always use single-flight, so the kill switch is the plain read path it
       has: every request produces the page itself, as every reader of the model's
       uncoordinated cache-aside misses before the first store.
    2. ``single-flight``: the same book page on the cached pair, its entries (data
       and whole-page tiers) deleted first and the fresh processes' local tiers
       empty: one request produces, the others wait for its value in their
       process or poll Redis for it.
    3. ``stale-while-revalidate``: the branch page, read once and left until it is
       past its fresh window (5 s) but inside its stale one; every request that
       finds it stale is answered at once while one background refresh runs.

    The counts are the servers' own (``library.cache.metrics``): ``origin_calls``,
    ``misses`` (requests that found no value and waited for a production, their
    own or a shared one) and ``stale_served``. The origin's delay is whatever the
    real query takes, so ``origin_delay_ms`` does not apply; ``p50_ms`` is the
    client's median latency. How many requests still find the stale value depends
    on how soon the refresh lands, which the machine decides; the origin calls and
    the waiting count of this row do not.
    """

    requests = params.requests
    book = Book.objects.order_by("pk").values_list("pk", "branch_id").first()
    if book is None:
        raise LabError("live: the database has no book (manage.py seed_library)")
    book_id, branch_id = book
    book_path, branch_path = f"/books/{book_id}/", f"/branches/{branch_id}/"
    flush_path = f"/branches/{branch_id}/books/"

    def settled(servers: list[Daphne]) -> Counters:
        return counters_settled(servers, LIVE_NAMESPACES, flush_path=flush_path)

    def fire(servers: list[Daphne], path: str) -> BurstResult:
        chosen = [servers[i % len(servers)] for i in range(requests)]
        targets = [(s.base_url + path, request_headers(s)) for s in chosen]
        result = burst(targets)
        bad = [status for status in result.statuses if status != 200]
        if bad:
            raise LabError(f"live: {len(bad)} of {requests} GET {path} not 200")
        return result

    bursts: list[Burst] = []
    with daphnes(progress, ["off", "off", "on", "on"]) as servers:
        uncached, cached = servers[:2], servers[2:]

        live_step(progress, 0.2, f"plain: {requests} GET {book_path}, cache off")
        before = counters(LIVE_NAMESPACES)
        result = fire(uncached, book_path)
        delta = counters_delta(settled(uncached), before)["book"]
        page = f"{book_path} (LIBRARY_CACHE=off)"
        bursts.append(Burst("plain", page, result.latencies_ms, delta))

        live_step(progress, 0.4, f"single-flight: {requests} GET {book_path}, cold")
        server_cold(books=[book_id])
        before = counters(LIVE_NAMESPACES)
        result = fire(cached, book_path)
        delta = counters_delta(settled(cached), before)["book"]
        page = f"{book_path} (cold entry)"
        bursts.append(Burst("single-flight", page, result.latencies_ms, delta))

        live_step(progress, 0.6, f"stale-while-revalidate: priming {branch_path}")
        server_cold(branches=[branch_id])
        with client_for(cached[0]) as client:
            primed = client.get(branch_path)
        if primed.status_code != 200:
            raise LabError(f"live: GET {branch_path} answered {primed.status_code}")
        ready = time.monotonic() + settings.CACHE_STOCK_FRESH_S + SWR_MARGIN_S
        before = settled(cached)  # also sends the priming's own counts first
        time.sleep(max(0.0, ready - time.monotonic()))
        live_step(progress, 0.8, f"stale-while-revalidate: {requests} GET, stale")
        result = fire(cached, branch_path)

        # The refresh runs in the background: wait until its origin call is counted.
        def refreshed() -> dict[str, int] | None:
            delta = counters_delta(settled(cached), before)["stock"]
            return delta if delta["origin_calls"] else None

        try:
            delta = wait_until(
                refreshed, "the refresh", timeout=REFRESH_TIMEOUT_S, interval=0
            )
        except WaitTimeout:
            delta = counters_delta(settled(cached), before)["stock"]
        page = f"{branch_path} (stale entry)"
        bursts.append(Burst("stale-while-revalidate", page, result.latencies_ms, delta))
    return Measurement(bursts)


def tables(params: HotKeyParams, measured: Measurement) -> Tables:
    """One row per burst: the servers' counts and the client's median latency."""
    rows: list[list[Cell]] = []
    for found in measured.bursts:
        latencies = found.latencies_ms
        p50 = percentile(latencies, 50) if latencies else 0.0
        rows.append(
            [
                found.strategy,
                found.page,
                found.counts["origin_calls"],
                found.counts["misses"],
                found.counts["stale_served"],
                round(p50, 1),
            ]
        )
    return {
        "live_stampede": table(
            [
                "strategy",
                "page",
                "origin_calls",
                "waiting_requests",
                "stale_responses",
                "p50_ms",
            ],
            rows,
        ),
    }


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
