"""Single-flight: one production per key across threads and across processes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from config.processes import ROOT, child_environment, wait_until
from config.redis_server import with_db
from library.cache.metrics import cache_redis, metrics_read, metrics_reset
from library.cache.singleflight import (
    flight_waiters,
    lock_acquire,
    lock_key,
    single_flight,
)
from library.tests.cache_db import CACHE_TEST_DB

# Other test runs on this machine empty database 15 (conftest's redis_client) at any
# moment, which would pull locks out from under these timing-sensitive tests: they use
# a database of their own and keys unique to each test, and delete only those.


@pytest.fixture(autouse=True)
def tag(settings):
    url = settings.REDIS_URL = with_db(settings.REDIS_URL, CACHE_TEST_DB)
    tag = uuid.uuid4().hex[:10]
    yield tag
    settings.REDIS_URL = url  # the test may have pointed it elsewhere
    metrics_reset(f"sf{tag}")
    client = cache_redis()
    for key in client.scan_iter(match=f"*{tag}*"):
        client.delete(key)


@pytest.fixture
def key(tag):
    """Keys unique to this test: key(1) -> "book:<tag>:1"."""
    return lambda n: f"book:{tag}:{n}"


@pytest.fixture
def counters(tag):
    def read():
        found = metrics_read(2).get(f"sf{tag}")  # a run may straddle a minute
        return found or {"singleflight_saved": 0, "singleflight_fallbacks": 0}

    return read


def test_fifty_threads_on_a_cold_key_produce_once(key, tag, counters):
    calls = []
    calls_lock = threading.Lock()
    start = threading.Barrier(50)
    results = []

    def produce():
        with calls_lock:
            calls.append(threading.get_ident())
        # Still producing while every other reader arrives and joins this flight.
        wait_until(lambda: flight_waiters(key(1)) == 49, "49 readers join the flight")
        return {"title": "The Name of the Rose", "on_shelf": 2}

    def reader():
        start.wait()
        results.append(
            single_flight(
                key(1), produce, lease_ms=5000, wait_ms=5000, namespace=f"sf{tag}"
            )
        )

    threads = [threading.Thread(target=reader) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(calls) == 1
    assert len(results) == 50
    assert {json.dumps(value) for value, _ in results} == {
        '{"title": "The Name of the Rose", "on_shelf": 2}'
    }
    assert sum(produced for _, produced in results) == 1
    assert counters()["singleflight_saved"] == 49


def test_threads_share_one_production_even_with_redis_down(key, tag, settings):
    # The in-process level alone: every Redis call fails, the origin is still
    # protected from the thundering herd of this process.
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    calls = []
    start = threading.Barrier(20)
    results = []

    def produce():
        calls.append(1)
        wait_until(lambda: flight_waiters(key(1)) == 19, "19 readers join the flight")
        return "from origin"

    def reader():
        start.wait()
        results.append(single_flight(key(1), produce, lease_ms=5000, wait_ms=5000))

    threads = [threading.Thread(target=reader) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(calls) == 1
    assert sorted(results) == [("from origin", False)] * 19 + [("from origin", True)]


def test_producer_stores_the_value_and_releases_its_lock(key):
    value, produced = single_flight(
        key(2), lambda: [1, 2], lease_ms=5000, wait_ms=100, lifetime_s=30
    )
    assert (value, produced) == ([1, 2], True)
    assert cache_redis().get(key(2)) == b"[1,2]"
    assert 0 < cache_redis().ttl(key(2)) <= 30
    assert cache_redis().exists(lock_key(key(2))) == 0
    # The next caller takes the lock, finds the stored value and does not produce.
    value, produced = single_flight(
        key(2), lambda: pytest.fail("produced twice"), lease_ms=5000, wait_ms=100
    )
    assert (value, produced) == ([1, 2], False)


def test_an_error_reaches_every_waiting_thread_and_frees_the_key(key):
    entered = threading.Event()
    errors = []
    calls = []

    def failing():
        calls.append(1)
        entered.set()
        # Fail only once the follower waits for this production, not before.
        wait_until(lambda: flight_waiters(key(3)) == 1, "the follower joins")
        raise RuntimeError("origin down")

    def follower():
        entered.wait()
        try:
            single_flight(key(3), failing, lease_ms=5000, wait_ms=5000)
        except RuntimeError as error:
            errors.append(str(error))

    thread = threading.Thread(target=follower)
    thread.start()
    with pytest.raises(RuntimeError, match="origin down"):
        single_flight(key(3), failing, lease_ms=5000, wait_ms=5000)
    thread.join(5)
    assert errors == ["origin down"]
    assert calls == [1]  # the follower got the leader's error, not one of its own
    assert cache_redis().exists(lock_key(key(3))) == 0
    assert single_flight(key(3), lambda: 7, lease_ms=5000, wait_ms=100) == (7, True)


def test_a_waiter_falls_back_after_the_bounded_wait(key, tag, counters):
    # Another process holds the lock far longer than this caller agrees to wait.
    assert lock_acquire(key(4), 10_000) is not None
    started = time.monotonic()
    value, produced = single_flight(
        key(4), lambda: "mine", lease_ms=1000, wait_ms=200, namespace=f"sf{tag}"
    )
    waited = time.monotonic() - started
    assert (value, produced) == ("mine", True)
    assert 0.2 <= waited < 1.0
    assert counters()["singleflight_fallbacks"] == 1


def test_a_crashed_producers_lock_dies_with_its_lease(key, tag, counters):
    # Lock taken and never released: the owner "crashed". Its 150 ms lease ends and
    # the waiter becomes the producer long before its 3 s wait is over.
    assert lock_acquire(key(5), 150) is not None
    started = time.monotonic()
    value, produced = single_flight(
        key(5), lambda: "recovered", lease_ms=1000, wait_ms=3000, namespace=f"sf{tag}"
    )
    assert (value, produced) == ("recovered", True)
    assert time.monotonic() - started < 1.0
    assert counters()["singleflight_fallbacks"] == 0


def test_only_the_owner_can_release_the_lock(key):
    old_lock = lock_acquire(key(6), 5000)
    assert old_lock is not None
    assert lock_acquire(key(6), 5000) is None  # held
    # The old owner's lease runs out while it is still working: Redis expires the
    # key, its lease cut to the shortest (1 ms) rather than slept through.
    assert cache_redis().pexpire(lock_key(key(6)), 1)
    wait_until(
        lambda: not cache_redis().exists(lock_key(key(6))), "the old lease expires"
    )
    new_lock = lock_acquire(key(6), 5000)
    assert new_lock is not None
    # The late producer finishes and releases: the newer owner's lock must survive.
    assert old_lock.release_if_owned() is False
    assert cache_redis().get(lock_key(key(6))) == new_lock.owner.encode()
    assert new_lock.release_if_owned() is True
    assert cache_redis().exists(lock_key(key(6))) == 0


CHILD = """
import json, os, sys, time
import django
django.setup()
from library.cache.singleflight import single_flight

key, log_path, ready_path, go_path = sys.argv[1:]

def produce():
    with open(log_path, "a") as log:
        log.write(f"{os.getpid()}\\n")
    time.sleep(0.5)
    return {"producer": os.getpid()}

open(ready_path, "w").close()
while not os.path.exists(go_path):
    time.sleep(0.002)
value, produced = single_flight(key, produce, lease_ms=5000, wait_ms=5000)
print(json.dumps({"value": value, "produced": produced, "pid": os.getpid()}))
"""


@pytest.mark.processes
def test_two_processes_share_one_production(tmp_path: Path, key):
    log = tmp_path / "productions.log"
    go = tmp_path / "go"
    env = child_environment()
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                key(99),
                str(log),
                str(tmp_path / f"r{n}"),
                str(go),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(3)
    ]

    def all_ready() -> bool:
        assert all(child.poll() is None for child in children), "a child died"
        return all((tmp_path / f"r{n}").exists() for n in range(3))

    try:
        wait_until(all_ready, "the three children start")
        go.touch()  # release all three at once
        outputs = [child.communicate(timeout=30) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    answers = [json.loads(out) for out, _ in outputs]
    assert len(log.read_text().split()) == 1, log.read_text()
    producer = int(log.read_text())
    assert [answer["value"] for answer in answers] == [{"producer": producer}] * 3
    assert sorted(answer["produced"] for answer in answers) == [False, False, True]
    stored = cache_redis().get(key(99))
    assert isinstance(stored, bytes)
    assert json.loads(stored) == {"producer": producer}
