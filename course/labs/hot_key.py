"""Lab for "Hot Key and Stampede Effect": one key under concurrent load.

Model part, three measurements:

1. ``stampede`` — ``requests`` readers ask for the branch stock key in the same
   instant, while producing it from the origin takes ``origin_delay_ms``. Three read
   paths are compared: plain cache-aside, single-flight (one production per key, the
   rest await it) and stale-while-revalidate (an expired entry is served while one
   background refresh runs). The readers are real coroutines on an asyncio loop whose
   clock is virtual: when nothing is runnable the loop jumps to the next timer instead
   of sleeping, so the counts come out of genuinely interleaved async code and the
   run takes no wall time. The ``duration`` table reports the virtual time until the
   last reader had its answer.
2. ``expiry`` — ``keys`` entries are loaded in the same step. With a fixed lifetime
   they all expire in one step; adding a key-derived deviation in ``[0, jitter)``
   spreads them out.
3. ``shards`` — ``shard_requests`` requests, six in ten on one hot key, are routed to
   ``shards`` nodes by digest; splitting the hot key into ``copies`` copies (request
   ``i`` uses copy ``i % copies``) lowers the busiest shard's share.

The digest is the course's: the first 8 hex digits of the key's SHA-256 as a number.

The live part (``live``) repeats the stampede with real HTTP requests on real daphne
processes and counts the origin calls the servers made.
"""

from __future__ import annotations

import asyncio
import hashlib
import selectors
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    int_list_param,
    int_param,
    table,
)
from course.labs.jsnum import js_fixed_number

HOT_KEY = "library:s1:g1:tbranch-1:stock"
FRESH_ON_SHELF = 137
STALE_ON_SHELF = 131  # what the expired entry still says in the stale-serving run


def digest(text: str) -> int:
    """Return the first 32 bits of SHA-256(text) as an integer (the course's digest)."""
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


# --- 1. the stampede, on a virtual clock ----------------------------------------

_T = TypeVar("_T")


class _JumpingSelector(selectors.SelectSelector):
    """Selector that never waits: it moves the loop's virtual clock instead.

    asyncio asks the selector to wait exactly until the earliest timer is due (or
    forever when there is none). Advancing the clock by that timeout makes the timer
    due at once. No file descriptor is ever ready: the lab does no real I/O.
    """

    def __init__(self, clock: _VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(
        self, timeout: float | None = None
    ) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            # Nothing runnable and no timer: every coroutine waits on another one.
            raise RuntimeError("virtual clock: the simulated readers are deadlocked")
        self._clock.now += max(0.0, timeout)
        return []


@dataclass
class _VirtualClock:
    now: float = 0.0


class _VirtualTimeLoop(asyncio.SelectorEventLoop):
    """Event loop whose time unit is one virtual millisecond, starting at zero."""

    def __init__(self) -> None:
        self._virtual = _VirtualClock()
        super().__init__(selector=_JumpingSelector(self._virtual))

    def time(self) -> float:
        return self._virtual.now


def run_virtual(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run ``main()`` to completion on a fresh virtual-time loop.

    A caller that is itself inside a running loop (an async view) cannot start a
    second loop on its thread, so the run then happens on a short-lived thread.
    """

    def on_own_loop() -> _T:
        loop = _VirtualTimeLoop()
        try:
            return loop.run_until_complete(main())
        finally:
            loop.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return on_own_loop()
    box: list[_T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            box.append(on_own_loop())
        except BaseException as error:  # re-raised on the caller's thread below
            errors.append(error)

    worker = threading.Thread(target=target, name="virtual-clock-lab")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    return box[0]


Value = dict[str, object]
Reader = Callable[[str], Awaitable[Value]]


@dataclass
class StampedeTally:
    origin_calls: int = 0
    pending: int = 0  # readers that had to wait for an origin answer
    stale: int = 0  # readers answered with the expired value
    duration_ms: float = 0.0


class SlowOrigin:
    """The expensive aggregate query: counted when it starts, answered after a delay."""

    def __init__(self, tally: StampedeTally, delay_ms: int) -> None:
        self._tally = tally
        self._delay_ms = delay_ms

    async def produce(self, key: str) -> Value:
        self._tally.origin_calls += 1
        await asyncio.sleep(self._delay_ms)  # the loop's unit is a millisecond
        return {"key": key, "on_shelf": FRESH_ON_SHELF}


class Background:
    """Holds refresh tasks nobody awaits, so the run can let them finish."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def plain_reader(origin: SlowOrigin, tally: StampedeTally, _: Background) -> Reader:
    stored: dict[str, Value] = {}

    async def read(key: str) -> Value:
        if key in stored:
            return stored[key]
        # Between this miss and the store below, every other reader misses too.
        tally.pending += 1
        value = await origin.produce(key)
        stored[key] = value
        return value

    return read


def single_flight_reader(
    origin: SlowOrigin, tally: StampedeTally, _: Background
) -> Reader:
    stored: dict[str, Value] = {}
    in_flight: dict[str, asyncio.Future[Value]] = {}

    async def fill(key: str) -> Value:
        value = await origin.produce(key)
        stored[key] = value
        del in_flight[key]
        return value

    async def read(key: str) -> Value:
        if key in stored:
            return stored[key]
        tally.pending += 1
        # The flight is registered before the first await, so a reader arriving in
        # the same instant already finds it and joins instead of starting another.
        if key not in in_flight:
            in_flight[key] = asyncio.ensure_future(fill(key))
        return await in_flight[key]

    return read


@dataclass
class _Entry:
    value: Value
    fresh: bool


def stale_while_revalidate_reader(
    origin: SlowOrigin, tally: StampedeTally, background: Background
) -> Reader:
    expired = _Entry({"key": HOT_KEY, "on_shelf": STALE_ON_SHELF}, fresh=False)
    stored: dict[str, _Entry] = {HOT_KEY: expired}
    refreshing: set[str] = set()

    async def refresh(key: str) -> None:
        value = await origin.produce(key)
        stored[key] = _Entry(value, fresh=True)
        refreshing.discard(key)

    async def read(key: str) -> Value:
        entry = stored.get(key)
        if entry is None:
            tally.pending += 1
            return await origin.produce(key)
        if not entry.fresh:
            if key not in refreshing:
                refreshing.add(key)
                background.start(refresh(key))
            tally.stale += 1
        return entry.value

    return read


ReaderFactory = Callable[[SlowOrigin, StampedeTally, Background], Reader]
STRATEGIES: tuple[tuple[str, ReaderFactory], ...] = (
    ("plain", plain_reader),
    ("single-flight", single_flight_reader),
    ("stale-while-revalidate", stale_while_revalidate_reader),
)


def stampede(factory: ReaderFactory, *, requests: int, delay_ms: int) -> StampedeTally:
    """Send ``requests`` simultaneous reads of the hot key through one read path."""
    tally = StampedeTally()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        background = Background()
        read = factory(SlowOrigin(tally, delay_ms), tally, background)
        started = loop.time()
        await asyncio.gather(*(read(HOT_KEY) for _ in range(requests)))
        tally.duration_ms = loop.time() - started
        # A refresh still running was counted when it started; let it end cleanly.
        while background.tasks:
            await asyncio.gather(*background.tasks)

    run_virtual(main)
    return tally


# --- 2. expiry landing on one step -------------------------------------------------


def expiry_row(label: str, steps: list[int]) -> list[Cell]:
    per_step: dict[int, int] = {}
    for step in steps:
        per_step[step] = per_step.get(step, 0) + 1
    return [label, len(per_step), max(per_step.values())]


def expiry_rows(*, keys: int, lifetime: int, jitter: int) -> list[list[Cell]]:
    names = [f"library:s1:g1:tbranch-1:book:{i}" for i in range(1, keys + 1)]

    def jittered(name: str) -> int:
        # In the course a zero spread is ``digest % 0``, NaN, and every key lands in
        # the one NaN step: the same outcome as no deviation at all.
        return lifetime + (digest(name) % jitter if jitter else 0)

    return [
        expiry_row("fixed lifetime", [lifetime for _ in names]),
        expiry_row("jittered lifetime", [jittered(name) for name in names]),
    ]


# --- 3. one key's weight on one shard ------------------------------------------------


def cold_key(i: int) -> str:
    branch, book = 2 + i % 3, i % 40
    return f"library:s1:g1:tbranch-{branch}:book:{book}"


def shard_requests_stream(count: int) -> list[str]:
    """Six in every ten requests read the hot key, the rest books of branches 2-4."""
    return [HOT_KEY if i % 10 < 6 else cold_key(i) for i in range(count)]


def shard_loads(keys: list[str], shards: int, copies: int | None) -> list[int]:
    loads = [0] * shards
    for i, key in enumerate(keys):
        routed = f"{key}.{i % copies}" if copies is not None and key == HOT_KEY else key
        loads[digest(routed) % shards] += 1
    return loads


def shard_rows(*, requests: int, shards: int, copies: list[int]) -> list[list[Cell]]:
    keys = shard_requests_stream(requests)
    variants: list[tuple[str, int | None]] = [("single key", None)]
    variants += [
        (f"split into {n} {'copy' if n == 1 else 'copies'}", n) for n in copies
    ]
    rows: list[list[Cell]] = []
    for label, n in variants:
        loads = shard_loads(keys, shards, n)
        busiest = js_fixed_number(max(loads) / requests * 100)
        rows.append([label, busiest, *loads])
    return rows


# --- the lab -------------------------------------------------------------------------


def model(params: Params, progress: Progress) -> Tables:
    requests = int_param(params, "requests")
    delay_ms = int_param(params, "origin_delay_ms")
    stampede_rows: list[list[Cell]] = []
    duration_rows: list[list[Cell]] = []
    for i, (name, factory) in enumerate(STRATEGIES):
        progress(0.05 + 0.2 * i, f"stampede: {name}")
        tally = stampede(factory, requests=requests, delay_ms=delay_ms)
        stampede_rows.append([name, tally.origin_calls, tally.pending, tally.stale])
        duration_rows.append([name, tally.duration_ms])
    progress(0.65, "expiry: keys loaded in the same step")
    expiry = expiry_rows(
        keys=int_param(params, "keys"),
        lifetime=int_param(params, "lifetime"),
        jitter=int_param(params, "jitter"),
    )
    progress(0.8, "shards: the hot key on a sharded cache")
    shards = int_param(params, "shards")
    loads = shard_rows(
        requests=int_param(params, "shard_requests"),
        shards=shards,
        copies=int_list_param(params, "copies"),
    )
    return {
        "stampede": table(
            ["strategy", "origin_calls", "pending_requests", "stale_responses"],
            stampede_rows,
        ),
        "duration": table(["strategy", "virtual_ms"], duration_rows),
        "expiry": table(["lifetime", "expiry_steps", "highest_miss_in_step"], expiry),
        "shards": table(
            ["distribution", "busiest_pct", *(f"shard_{n}" for n in range(shards))],
            loads,
        ),
    }


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
    import time

    import httpx

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


def live(params: Params, progress: Progress) -> Tables:
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
    import time

    from course.labs.base import LabError
    from course.labs.live import live_step
    from course.labs.live_http import (
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
    from library.cache.reads import STOCK_FRESH_S
    from library.models import Book

    requests = int_param(params, "requests")
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

    rows: list[list[Cell]] = []

    def row(name: str, page: str, result: BurstResult, delta: dict[str, int]) -> None:
        p50 = percentile(result.latencies_ms, 50) if result.latencies_ms else 0.0
        rows.append(
            [
                name,
                page,
                delta["origin_calls"],
                delta["misses"],
                delta["stale_served"],
                round(p50, 1),
            ]
        )

    with daphnes(progress, ["off", "off", "on", "on"]) as servers:
        uncached, cached = servers[:2], servers[2:]

        live_step(progress, 0.2, f"plain: {requests} GET {book_path}, cache off")
        before = counters(LIVE_NAMESPACES)
        result = fire(uncached, book_path)
        delta = counters_delta(settled(uncached), before)["book"]
        row("plain", f"{book_path} (LIBRARY_CACHE=off)", result, delta)

        live_step(progress, 0.4, f"single-flight: {requests} GET {book_path}, cold")
        server_cold(books=[book_id])
        before = counters(LIVE_NAMESPACES)
        result = fire(cached, book_path)
        delta = counters_delta(settled(cached), before)["book"]
        row("single-flight", f"{book_path} (cold entry)", result, delta)

        live_step(progress, 0.6, f"stale-while-revalidate: priming {branch_path}")
        server_cold(branches=[branch_id])
        with client_for(cached[0]) as client:
            primed = client.get(branch_path)
        if primed.status_code != 200:
            raise LabError(f"live: GET {branch_path} answered {primed.status_code}")
        ready = time.monotonic() + STOCK_FRESH_S + SWR_MARGIN_S
        before = settled(cached)  # also sends the priming's own counts first
        time.sleep(max(0.0, ready - time.monotonic()))
        live_step(progress, 0.8, f"stale-while-revalidate: {requests} GET, stale")
        result = fire(cached, branch_path)
        deadline = time.monotonic() + REFRESH_TIMEOUT_S
        # The refresh runs in the background: wait until its origin call is counted.
        while True:
            delta = counters_delta(settled(cached), before)["stock"]
            if delta["origin_calls"] or time.monotonic() > deadline:
                break
        row("stale-while-revalidate", f"{branch_path} (stale entry)", result, delta)
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


LAB = Lab(
    slug="hot-key-and-stampede-effect",
    title="Hot Key and Stampede Effect",
    params=(
        Param(
            "requests",
            "int",
            100,
            "readers arriving at the same instant",
            minimum=0,
            maximum=10_000,
        ),
        Param(
            "origin_delay_ms",
            "int",
            30,
            "time the origin takes to answer (virtual)",
            minimum=0,
            maximum=3_600_000,
        ),
        Param(
            "keys",
            "int",
            200,
            "keys loaded in the same step",
            minimum=1,
            maximum=100_000,
        ),
        Param(
            "lifetime",
            "int",
            100,
            "lifetime in steps",
            minimum=1,
            maximum=1_000_000_000,
        ),
        Param(
            "jitter",
            "int",
            40,
            "key-derived lifetime deviation, in steps (0: none)",
            minimum=0,
            maximum=1_000_000_000,
        ),
        Param(
            "shard_requests",
            "int",
            1000,
            "requests routed to the shards",
            minimum=1,
            maximum=200_000,
        ),
        Param("shards", "int", 4, "cache nodes", minimum=1, maximum=32),
        Param(
            "copies",
            "int_list",
            [4, 8],
            "copies of the hot key, one row each",
            minimum=1,
            maximum=100_000,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="stampede",
            label="strategy",
            values=("origin_calls", "pending_requests", "stale_responses"),
            title="Simultaneous readers: origin calls, waits and stale answers",
        ),
        Chart(
            table="expiry",
            label="lifetime",
            values=("highest_miss_in_step",),
            title="Most keys expiring in one step",
        ),
        Chart(
            table="shards",
            label="distribution",
            values=("busiest_pct",),
            title="Share of requests on the busiest shard",
            unit="%",
        ),
    ),
)
