"""Cache-aside, write-through, stale-while-revalidate, deletes and generations,
against the real Redis."""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from redis.client import Pipeline

from config.processes import wait_until
from config.redis_server import with_db
from library.cache import metrics
from library.cache.metrics import (
    cache_redis,
    metrics_flush,
    metrics_read,
    metrics_reset,
    redis_errors_total,
)
from library.cache.singleflight import flight_waiters
from library.cache.store import (
    LocalTier,
    cache_aside,
    cache_delete,
    encode,
    generation_bump,
    generation_get,
    local_tier,
    refreshes_wait,
    stale_while_revalidate,
    write_through,
)
from library.cache.ttl import lifetime_with_jitter
from library.tests.cache_db import CACHE_TEST_DB

# Other test runs on this machine empty database 15 (conftest's redis_client) at any
# moment; these tests use a database of their own and keys unique to each test, and
# delete only those.

CLOSED_PORT_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1

BOOK = {"id": 7, "title": "Küçük Ağa", "on_shelf": 3}


@pytest.fixture(autouse=True)
def tag(settings):
    url = settings.REDIS_URL = with_db(settings.REDIS_URL, CACHE_TEST_DB)
    tag = uuid.uuid4().hex[:10]
    yield tag
    settings.REDIS_URL = url  # the test may have pointed it elsewhere
    refreshes_wait(5)
    local_tier.clear()
    metrics_reset(f"st{tag}")
    client = cache_redis()
    for key in client.scan_iter(match=f"*{tag}*"):
        client.delete(key)


@pytest.fixture
def key(tag):
    return lambda n: f"library:s1:g1:t{tag}:book:{n}"


@pytest.fixture
def ns(tag):
    return f"st{tag}"


class Origin:
    """A counted origin returning ``value``; thread-safe.

    Given ``until``, a call returns only once ``until()`` is true: the origin is as
    slow as the test needs (the other readers pile up behind it, or answer before
    it), never for a guessed delay.
    """

    def __init__(
        self, value: object, until: Callable[[], object] | None = None
    ) -> None:
        self.value = value
        self.until = until
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            self.calls += 1
        if self.until is not None:
            wait_until(self.until, "the origin's condition")
        return self.value


class Clock:
    """A clock (seconds) that moves only when the test sets ``now``."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# A wall-clock instant for the fresh-until stamps: whole seconds, so that adding a
# whole fresh_s lands exactly on the boundary (no float rounding).
WALL = 1_800_000_000.0


@pytest.fixture
def round_trips(monkeypatch):
    """Count what the cache client sends to Redis (commands and pipelines)."""
    counts = {"commands": 0, "pipelines": 0}
    client = cache_redis()
    send_command = client.execute_command
    run_pipeline = Pipeline.execute

    def counting_command(*args, **options):
        counts["commands"] += 1
        return send_command(*args, **options)

    def counting_pipeline(self, *args, **options):
        counts["pipelines"] += 1
        return run_pipeline(self, *args, **options)

    monkeypatch.setattr(client, "execute_command", counting_command)
    monkeypatch.setattr(Pipeline, "execute", counting_pipeline)
    return counts


# --- cache-aside --------------------------------------------------------------------


def test_cache_aside_misses_once_then_hits(key, ns):
    origin = Origin(BOOK)
    first = cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60)
    second = cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60)
    assert first == second == BOOK
    assert origin.calls == 1
    stored = cache_redis().get(key(1))
    assert stored == encode(BOOK)
    assert b": " not in stored  # compact JSON, non-ASCII kept as UTF-8
    assert "Küçük".encode() in stored
    counters = metrics_read(2)[ns]  # two minutes: a test may straddle one
    assert (counters["hits"], counters["misses"], counters["sets"]) == (1, 1, 1)
    assert counters["hit_bytes"] == counters["miss_bytes"] == len(stored)
    assert counters["origin_calls"] == 1
    assert (counters["hit_ratio"], counters["byte_hit_ratio"]) == (0.5, 0.5)


def test_cache_aside_sets_the_jittered_lifetime(key, ns):
    lifetimes = set()
    for n in range(20):
        cache_aside(
            key=key(n), namespace=ns, produce=Origin(n), lifetime_s=100, jitter_s=40
        )
        expected_ms = lifetime_with_jitter(key(n), 100, 40) * 1000
        pttl = cache_redis().pttl(key(n))
        assert expected_ms - 2000 < pttl <= expected_ms
        lifetimes.add(expected_ms)
    assert len(lifetimes) > 5  # the keys do not all expire together


def test_cache_aside_without_single_flight_still_stores(key, ns):
    origin = Origin([1, 2, 3])
    for _ in range(3):
        assert cache_aside(
            key=key(1), namespace=ns, produce=origin, lifetime_s=30, singleflight=False
        ) == [1, 2, 3]
    assert origin.calls == 1
    assert 0 < cache_redis().ttl(key(1)) <= 30


def test_concurrent_misses_reach_the_origin_once(key, ns):
    # The one origin call lasts until the 29 other readers wait for it.
    origin = Origin(BOOK, until=lambda: flight_waiters(key(1)) == 29)
    start = threading.Barrier(30)
    answers = []

    def reader():
        start.wait()
        answers.append(
            cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60)
        )

    threads = [threading.Thread(target=reader) for _ in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert answers == [BOOK] * 30
    assert origin.calls == 1
    counters = metrics_read(2)[ns]  # two minutes: a test may straddle one
    assert counters["misses"] == 30
    assert counters["singleflight_saved"] == 29


def test_local_tier_answers_without_redis_round_trips(key, ns, round_trips):
    origin = Origin(BOOK)
    cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60, local_s=5)
    metrics_flush()  # empty buffer, fresh flush clock: no flush falls in the loop
    round_trips.update(commands=0, pipelines=0)
    for _ in range(100):
        value = cache_aside(
            key=key(1), namespace=ns, produce=origin, lifetime_s=60, local_s=5
        )
        assert value == BOOK
    assert round_trips == {"commands": 0, "pipelines": 0}
    assert origin.calls == 1
    # Each caller gets its own copy: changing one does not change the next answer.
    value["title"] = "changed"
    assert (
        cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60, local_s=5)
        == BOOK
    )
    counters = metrics_read(2)[ns]  # two minutes: a test may straddle one
    assert counters["local_hits"] == 101
    assert counters["hits"] == 101


def test_local_tier_entries_expire_and_are_bounded(ns):
    clock = Clock(1000.0)
    tier = LocalTier(max_entries=3, clock=clock)
    tier.put("a", b"1", lifetime_s=0.5, namespace=ns)
    assert tier.get("a", namespace=ns) == b"1"
    clock.now = math.nextafter(1000.5, 0)  # the last instant of its lifetime
    assert tier.get("a", namespace=ns) == b"1"
    clock.now = 1000.5  # put + lifetime: expired from this instant on
    assert tier.get("a", namespace=ns) is None
    for name in "bcde":
        tier.put(name, name.encode(), lifetime_s=60, namespace=ns)
    assert len(tier) == 3
    assert tier.get("b", namespace=ns) is None  # the least recently used went first
    assert tier.get("e", namespace=ns) == b"e"
    counters = metrics_read(2)[ns]  # two minutes: a test may straddle one
    assert (counters["expiries"], counters["evictions"]) == (1, 1)


# --- write-through, delete, generations ---------------------------------------------


def test_write_through_serves_the_new_value_without_the_origin(key, ns):
    origin = Origin({"on_shelf": 3})
    cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60, local_s=5)
    assert write_through(key=key(1), namespace=ns, value={"on_shelf": 2}, lifetime_s=60)
    assert cache_aside(
        key=key(1), namespace=ns, produce=origin, lifetime_s=60, local_s=5
    ) == {"on_shelf": 2}
    assert origin.calls == 1
    assert 0 < cache_redis().ttl(key(1)) <= 60


def test_delete_sends_the_next_read_to_the_origin(key, ns):
    origin = Origin(BOOK)
    cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60, local_s=5)
    assert cache_delete(key(1)) is True
    assert cache_redis().exists(key(1)) == 0
    cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60, local_s=5)
    assert origin.calls == 2


def test_generations_start_at_one_and_bump_per_tenant(ns, tag):
    assert generation_get(ns, f"branch-1-{tag}") == 1
    assert generation_bump(ns, f"branch-1-{tag}") == 2
    assert generation_bump(ns, f"branch-1-{tag}") == 3
    assert generation_get(ns, f"branch-1-{tag}") == 3
    assert generation_get(ns, f"branch-2-{tag}") == 1


# --- stale-while-revalidate ---------------------------------------------------------


def test_swr_produces_synchronously_without_an_entry_then_serves_fresh(key, ns):
    origin = Origin(BOOK)
    assert stale_while_revalidate(
        key=key(1), namespace=ns, produce=origin, fresh_s=5, stale_s=30
    ) == (BOOK, False)
    assert stale_while_revalidate(
        key=key(1), namespace=ns, produce=origin, fresh_s=5, stale_s=30
    ) == (BOOK, False)
    assert origin.calls == 1
    assert 30_000 < cache_redis().pttl(key(1)) <= 35_000


def test_swr_serves_stale_at_once_and_refreshes_once_under_20_readers(key, ns):
    clock = Clock(WALL)
    old = Origin({"on_shelf": 3})
    stale_while_revalidate(
        key=key(1), namespace=ns, produce=old, fresh_s=5, stale_s=30, clock=clock
    )
    clock.now = math.nextafter(WALL + 5, 0)  # the last fresh instant: no refresh
    assert stale_while_revalidate(
        key=key(1), namespace=ns, produce=old, fresh_s=5, stale_s=30, clock=clock
    ) == ({"on_shelf": 3}, False)
    clock.now = WALL + 5  # fresh_s after the store: stale, but still stored
    origin_done = threading.Event()
    new = Origin({"on_shelf": 1}, until=origin_done.is_set)
    start = threading.Barrier(20)
    answers = []

    def reader():
        start.wait()
        answers.append(
            stale_while_revalidate(
                key=key(1),
                namespace=ns,
                produce=new,
                fresh_s=60,
                stale_s=30,
                clock=clock,
            )
        )

    threads = [threading.Thread(target=reader) for _ in range(20)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        # Nobody waited for the origin: all 20 answered while its one call (the
        # background refresh) is still held at the gate.
        assert answers == [({"on_shelf": 3}, True)] * 20
        wait_until(lambda: new.calls == 1, "the background refresh calls the origin")
    finally:
        origin_done.set()
    assert refreshes_wait(5)
    assert new.calls == 1
    assert stale_while_revalidate(
        key=key(1), namespace=ns, produce=new, fresh_s=60, stale_s=30, clock=clock
    ) == ({"on_shelf": 1}, False)
    assert new.calls == 1
    counters = metrics_read(2)[ns]  # two minutes: a test may straddle one
    assert counters["stale_served"] == 20
    assert counters["origin_calls"] == 2


def test_a_failing_refresh_keeps_serving_the_stale_value(key, ns, caplog):
    clock = Clock(WALL)
    stale_while_revalidate(
        key=key(1),
        namespace=ns,
        produce=lambda: "old",
        fresh_s=5,
        stale_s=30,
        clock=clock,
    )
    clock.now = WALL + 5  # stale from here on

    def broken():
        raise RuntimeError("origin down")

    def read(produce):
        return stale_while_revalidate(
            key=key(1),
            namespace=ns,
            produce=produce,
            fresh_s=60,
            stale_s=30,
            clock=clock,
        )

    with caplog.at_level(logging.ERROR, logger="library.cache.store"):
        answer = read(broken)
        assert refreshes_wait(5)
    assert answer == ("old", True)
    assert "background refresh" in caplog.text
    assert cache_redis().exists(f"sf:{key(1)}") == 0  # the lock was released
    assert read(lambda: "new") == ("old", True)
    assert refreshes_wait(5)
    assert read(broken) == ("new", False)


# --- Redis down ---------------------------------------------------------------------


def test_with_redis_down_the_origin_still_answers(
    key, ns, settings, caplog, monkeypatch
):
    monkeypatch.setattr(metrics, "_last_warning_at", float("-inf"))
    settings.REDIS_URL = CLOSED_PORT_URL
    origin = Origin(BOOK)
    errors_before = redis_errors_total()
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="library.cache.metrics"):
        for _ in range(5):
            assert (
                cache_aside(key=key(1), namespace=ns, produce=origin, lifetime_s=60)
                == BOOK
            )
            assert stale_while_revalidate(
                key=key(2), namespace=ns, produce=origin, fresh_s=5, stale_s=5
            ) == (BOOK, False)
        assert (
            write_through(key=key(1), namespace=ns, value=BOOK, lifetime_s=60) is False
        )
        assert cache_delete(key(1)) is False
        assert generation_get(ns, "branch-1") == 0
        metrics_flush()  # must not raise either
    assert time.monotonic() - began < 2.0
    assert origin.calls == 10
    assert redis_errors_total() > errors_before
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once a minute, not once a request
    assert "serving from the origin" in warnings[0].getMessage()
