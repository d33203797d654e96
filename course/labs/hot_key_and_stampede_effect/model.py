"""The model part of the hot-key lab: the stampede on a virtual-clock asyncio loop,
expiry landing on one step, and one key's weight on one shard.
"""

from __future__ import annotations

import asyncio
import selectors
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.jsnum import js_fixed_number
from course.labs.hot_key_and_stampede_effect.params import HotKeyParams
from library.cache.ttl import hot_copy_key, key_digest, shard_of

HOT_KEY = "library:s1:g1:tbranch-1:stock"
FRESH_ON_SHELF = 137
STALE_ON_SHELF = 131  # what the expired entry still says in the stale-serving run


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
        # Not library.cache.ttl.lifetime_with_jitter: that one caps at 24 hours, and
        # the course's lifetimes (in steps, up to 10**9) are not capped. The deviation
        # is the same: the key's digest modulo the spread. In the course a zero spread
        # is ``digest % 0``, NaN, and every key lands in the one NaN step: the same
        # outcome as no deviation at all.
        return lifetime + (key_digest(name) % jitter if jitter else 0)

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
        split = copies is not None and key == HOT_KEY
        routed = hot_copy_key(key, copies, i) if split and copies else key
        loads[shard_of(routed, shards)] += 1
    return loads


def _variants(copies: list[int]) -> list[tuple[str, int | None]]:
    variants: list[tuple[str, int | None]] = [("single key", None)]
    variants += [
        (f"split into {n} {'copy' if n == 1 else 'copies'}", n) for n in copies
    ]
    return variants


def shard_rows(*, requests: int, shards: int, copies: list[int]) -> list[list[Cell]]:
    keys = shard_requests_stream(requests)
    rows: list[list[Cell]] = []
    for label, n in _variants(copies):
        loads = shard_loads(keys, shards, n)
        # The course divides by the request count: with none it prints NaN (null).
        share = max(loads) / requests * 100 if requests else float("nan")
        busiest = js_fixed_number(share)
        rows.append([label, busiest, *loads])
    return rows


def busiest_rows(*, requests: int, shards: int, copies: list[int]) -> list[list[Cell]]:
    """Split each distribution's busiest shard into hot-key and other-key requests.

    Not a course table: it is what a learner's busiest_pct is made of, so a missed
    prediction can be explained from the run's own numbers (the first busiest shard
    when several tie, as ``max`` picks it).
    """
    keys = shard_requests_stream(requests)
    hot_only = [key if key == HOT_KEY else "" for key in keys]
    rows: list[list[Cell]] = []
    for label, n in _variants(copies):
        loads = shard_loads(keys, shards, n)
        busiest = loads.index(max(loads))
        hot = [0] * shards
        for i, key in enumerate(hot_only):
            if key:
                routed = hot_copy_key(key, n, i) if n else key
                hot[shard_of(routed, shards)] += 1
        rows.append(
            [
                label,
                f"shard_{busiest}",
                loads[busiest],
                hot[busiest],
                loads[busiest] - hot[busiest],
            ]
        )
    return rows


# --- the lab -------------------------------------------------------------------------


def model(params: HotKeyParams, progress: Progress) -> Tables:
    requests = params.requests
    delay_ms = params.origin_delay_ms
    stampede_rows: list[list[Cell]] = []
    duration_rows: list[list[Cell]] = []
    for i, (name, factory) in enumerate(STRATEGIES):
        progress(0.05 + 0.2 * i, f"stampede: {name}")
        tally = stampede(factory, requests=requests, delay_ms=delay_ms)
        stampede_rows.append([name, tally.origin_calls, tally.pending, tally.stale])
        duration_rows.append([name, tally.duration_ms])
    progress(0.65, "expiry: keys loaded in the same step")
    expiry = expiry_rows(
        keys=params.keys,
        lifetime=params.lifetime,
        jitter=params.jitter,
    )
    progress(0.8, "shards: the hot key on a sharded cache")
    shards = params.shards
    shard_requests = params.shard_requests
    copies = params.copies
    loads = shard_rows(requests=shard_requests, shards=shards, copies=copies)
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
        "busiest": table(
            ["distribution", "shard", "requests", "hot_key", "other_keys"],
            busiest_rows(requests=shard_requests, shards=shards, copies=copies),
        ),
    }
