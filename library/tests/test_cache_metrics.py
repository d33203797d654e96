"""Per-namespace cache counters: buffered, flushed in one pipeline, read by window."""

from __future__ import annotations

import time
import uuid

import pytest
from redis.client import Pipeline

from config.processes import wait_until
from config.redis_server import with_db
from library.cache import metrics
from library.cache.metrics import (
    FLUSH_EVENTS,
    NAMESPACES_KEY,
    REDIS_TOTALS,
    cache_redis,
    metrics_flush,
    metrics_read,
    metrics_record,
    metrics_reset,
)
from library.tests.cache_db import CACHE_TEST_DB

# Mid-minute, so +-30 s stays in the same bucket.
NOW = 1_700_000_030.0

# Other test runs on this machine empty database 15 (conftest's redis_client) at any
# moment; these tests use a database of their own and names unique to each test, and
# clean up only what they wrote, so two runs cannot disturb each other.


@pytest.fixture(autouse=True)
def tag(settings):
    """A text unique to this test, for its namespaces."""
    url = settings.REDIS_URL = with_db(settings.REDIS_URL, CACHE_TEST_DB)
    tag = uuid.uuid4().hex[:10]
    yield tag
    settings.REDIS_URL = url  # the test may have pointed it elsewhere
    for namespace in ("books", "branches", "search", "ns0", "ns1", "ns2"):
        metrics_reset(f"{namespace}{tag}")


@pytest.fixture
def ns(tag):
    """Namespace names made unique to this test: ns("books") -> "books<tag>"."""
    return lambda name: f"{name}{tag}"


@pytest.fixture
def round_trips(monkeypatch):
    """Count the commands and pipelines the cache client sends to Redis."""
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


def test_counters_accumulate_across_flushes(ns):
    metrics_record(ns("books"), now=NOW, hits=2, hit_bytes=100)
    metrics_flush()
    metrics_record(ns("books"), now=NOW, hits=3, misses=1, hit_bytes=50, miss_bytes=30)
    metrics_flush()
    metrics_record(ns("books"), now=NOW, hits=1)  # still buffered: read must flush it
    books = metrics_read(1, now=NOW)[ns("books")]
    assert (books["hits"], books["misses"]) == (6, 1)
    assert (books["hit_bytes"], books["miss_bytes"]) == (150, 30)
    assert books["hit_ratio"] == pytest.approx(6 / 7)
    assert books["byte_hit_ratio"] == pytest.approx(150 / 180)


def test_recording_sends_nothing_and_a_flush_is_one_pipeline(round_trips, ns):
    metrics_flush()  # start from an empty buffer and a fresh flush clock
    round_trips.update(commands=0, pipelines=0)
    for i in range(FLUSH_EVENTS - 1):
        metrics_record(ns(f"ns{i % 3}"), hits=1, hit_bytes=10, cache_ms_total=1)
    assert round_trips == {"commands": 0, "pipelines": 0}
    metrics_flush()
    assert round_trips == {"commands": 0, "pipelines": 1}
    client = cache_redis()
    bucket = client.hgetall(f"cachemetrics:{ns('ns0')}:{int(time.time() // 60)}")
    assert int(bucket[b"hits"]) == len(range(0, FLUSH_EVENTS - 1, 3))
    assert (
        0
        < client.ttl(f"cachemetrics:{ns('ns0')}:{int(time.time() // 60)}")
        <= 3 * 86400
    )


def test_the_buffer_flushes_itself_after_enough_events(round_trips, ns):
    metrics_flush()
    round_trips.update(commands=0, pipelines=0)
    for _ in range(FLUSH_EVENTS):
        metrics_record(ns("books"), misses=1)
    assert round_trips["pipelines"] == 1
    assert round_trips["commands"] == 0


def test_the_buffer_flushes_itself_after_the_interval(round_trips, monkeypatch, ns):
    metrics_flush()
    round_trips.update(commands=0, pipelines=0)
    metrics_record(ns("books"), misses=1)
    assert round_trips["pipelines"] == 0
    monkeypatch.setattr(metrics, "_last_flush_at", time.monotonic() - 5)
    metrics_record(ns("books"), misses=1)
    assert round_trips["pipelines"] == 1


def test_a_window_sums_only_its_minute_buckets(ns):
    metrics_record(ns("books"), now=NOW, hits=1)
    metrics_record(ns("books"), now=NOW - 120, hits=10)  # two minutes earlier
    metrics_record(ns("books"), now=NOW - 600, hits=100)  # ten minutes earlier
    metrics_record(ns("search"), now=NOW - 600, misses=4)
    assert metrics_read(1, now=NOW)[ns("books")]["hits"] == 1
    assert metrics_read(3, now=NOW)[ns("books")]["hits"] == 11
    assert metrics_read(11, now=NOW)[ns("books")]["hits"] == 111
    assert ns("search") not in metrics_read(10, now=NOW)
    assert metrics_read(11, now=NOW)[ns("search")]["misses"] == 4
    # A window ending earlier leaves out the later minutes.
    assert metrics_read(1, now=NOW - 120)[ns("books")]["hits"] == 10


def test_namespaces_are_kept_apart_and_ratios_are_none_without_requests(ns):
    metrics_record(ns("books"), now=NOW, hits=3, misses=1)
    metrics_record(ns("branches"), now=NOW, sets=2)
    report = metrics_read(1, now=NOW)
    assert report[ns("books")]["hit_ratio"] == 0.75
    assert report[ns("books")]["byte_hit_ratio"] is None
    assert report[ns("branches")]["sets"] == 2
    assert report[ns("branches")]["hit_ratio"] is None


def test_reset_forgets_buffered_and_stored_counters_of_a_namespace(ns):
    for name in ("books", "books*", "search"):
        metrics_record(ns(name), now=NOW, hits=5)
    metrics_flush()
    metrics_record(ns("books"), now=NOW, hits=5)  # buffered only
    metrics_reset(ns("books"))
    report = metrics_read(1, now=NOW)
    assert ns("books") not in report
    assert report[ns("books*")]["hits"] == 5  # a glob character is taken literally
    assert report[ns("search")]["hits"] == 5
    client = cache_redis()
    assert not list(client.scan_iter(match=f"cachemetrics:{ns('books')}:*"))
    assert not client.sismember(NAMESPACES_KEY, ns("books"))
    metrics_reset(ns("books*"))


def test_reset_without_a_namespace_forgets_everything(ns, settings):
    # Its own database: a full reset must not wipe a concurrent run's counters.
    settings.REDIS_URL = with_db(settings.REDIS_URL, CACHE_TEST_DB - 1)
    metrics_record(ns("books"), now=NOW, hits=5)
    metrics_flush()
    metrics_record(ns("search"), now=NOW, hits=5)  # buffered only
    metrics_reset()
    assert set(metrics_read(1, now=NOW)) == {REDIS_TOTALS}
    assert not list(cache_redis().scan_iter(match="cachemetrics:*"))


def test_redis_evictions_and_expiries_are_reported_as_server_totals(ns):
    before = metrics_read(1)[REDIS_TOTALS]["expiries"]
    client = cache_redis()
    key = f"short{ns('')}"
    client.set(key, b"x")
    assert client.get(key) == b"x"
    # The shortest lifetime; Redis's own clock ends it, so poll until it has. A GET
    # of an expired key deletes it (the lazy expiry), and that counts.
    assert client.pexpire(key, 1)
    wait_until(lambda: client.get(key) is None, "the key expires")
    totals = metrics_read(1)[REDIS_TOTALS]
    assert totals["expiries"] >= before + 1
    assert totals["evictions"] >= 0


def test_bad_names_are_refused(ns):
    with pytest.raises(ValueError, match="unknown"):
        metrics_record(ns("books"), hitz=1)
    with pytest.raises(ValueError, match="namespace"):
        metrics_record("redis:global", hits=1)
    with pytest.raises(ValueError, match="namespace"):
        metrics_record("", hits=1)
