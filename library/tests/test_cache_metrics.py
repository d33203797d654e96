"""Per-namespace cache counters: buffered, flushed in one pipeline, read by window."""

from __future__ import annotations

import time

import pytest
from redis.client import Pipeline

from library.cache import metrics
from library.cache.metrics import (
    FLUSH_EVENTS,
    REDIS_TOTALS,
    cache_redis,
    metrics_flush,
    metrics_read,
    metrics_record,
    metrics_reset,
)

# Mid-minute, so +-30 s stays in the same bucket.
NOW = 1_700_000_030.0


@pytest.fixture(autouse=True)
def clean_metrics(redis_client):
    metrics_reset()
    yield
    metrics_reset()


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


def test_counters_accumulate_across_flushes():
    metrics_record("books", now=NOW, hits=2, hit_bytes=100)
    metrics_flush()
    metrics_record("books", now=NOW, hits=3, misses=1, hit_bytes=50, miss_bytes=30)
    metrics_flush()
    metrics_record("books", now=NOW, hits=1)  # still buffered: read must flush it
    books = metrics_read(1, now=NOW)["books"]
    assert (books["hits"], books["misses"]) == (6, 1)
    assert (books["hit_bytes"], books["miss_bytes"]) == (150, 30)
    assert books["hit_ratio"] == pytest.approx(6 / 7)
    assert books["byte_hit_ratio"] == pytest.approx(150 / 180)


def test_recording_sends_nothing_and_a_flush_is_one_pipeline(round_trips):
    metrics_flush()  # start from an empty buffer and a fresh flush clock
    round_trips.update(commands=0, pipelines=0)
    for i in range(FLUSH_EVENTS - 1):
        metrics_record(f"ns{i % 3}", hits=1, hit_bytes=10, cache_ms_total=1)
    assert round_trips == {"commands": 0, "pipelines": 0}
    metrics_flush()
    assert round_trips == {"commands": 0, "pipelines": 1}
    client = cache_redis()
    bucket = client.hgetall(f"cachemetrics:ns0:{int(time.time() // 60)}")
    assert int(bucket[b"hits"]) == len(range(0, FLUSH_EVENTS - 1, 3))
    assert 0 < client.ttl(f"cachemetrics:ns0:{int(time.time() // 60)}") <= 3 * 86400


def test_the_buffer_flushes_itself_after_enough_events(round_trips):
    metrics_flush()
    round_trips.update(commands=0, pipelines=0)
    for _ in range(FLUSH_EVENTS):
        metrics_record("books", misses=1)
    assert round_trips["pipelines"] == 1
    assert round_trips["commands"] == 0


def test_the_buffer_flushes_itself_after_the_interval(round_trips, monkeypatch):
    metrics_flush()
    round_trips.update(commands=0, pipelines=0)
    metrics_record("books", misses=1)
    assert round_trips["pipelines"] == 0
    monkeypatch.setattr(metrics, "_last_flush_at", time.monotonic() - 5)
    metrics_record("books", misses=1)
    assert round_trips["pipelines"] == 1


def test_a_window_sums_only_its_minute_buckets():
    metrics_record("books", now=NOW, hits=1)
    metrics_record("books", now=NOW - 120, hits=10)  # two minutes earlier
    metrics_record("books", now=NOW - 600, hits=100)  # ten minutes earlier
    metrics_record("search", now=NOW - 600, misses=4)
    assert metrics_read(1, now=NOW)["books"]["hits"] == 1
    assert metrics_read(3, now=NOW)["books"]["hits"] == 11
    assert metrics_read(11, now=NOW)["books"]["hits"] == 111
    assert "search" not in metrics_read(10, now=NOW)
    assert metrics_read(11, now=NOW)["search"]["misses"] == 4
    # A window ending earlier leaves out the later minutes.
    assert metrics_read(1, now=NOW - 120)["books"]["hits"] == 10


def test_namespaces_are_kept_apart_and_ratios_are_none_without_requests():
    metrics_record("books", now=NOW, hits=3, misses=1)
    metrics_record("branches", now=NOW, sets=2)
    report = metrics_read(1, now=NOW)
    assert report["books"]["hit_ratio"] == 0.75
    assert report["books"]["byte_hit_ratio"] is None
    assert report["branches"]["sets"] == 2
    assert report["branches"]["hit_ratio"] is None


def test_reset_forgets_buffered_and_stored_counters():
    metrics_record("books", now=NOW, hits=5)
    metrics_flush()
    metrics_record("books", now=NOW, hits=5)  # buffered only
    metrics_reset()
    assert set(metrics_read(1, now=NOW)) == {REDIS_TOTALS}
    assert not list(cache_redis().scan_iter(match="cachemetrics:*"))


def test_redis_evictions_and_expiries_are_reported_as_server_totals():
    before = metrics_read(1)[REDIS_TOTALS]["expiries"]
    client = cache_redis()
    client.set("metrics-test:short", b"x", px=1)
    time.sleep(0.01)
    assert client.get("metrics-test:short") is None  # the lazy expiry counts it
    totals = metrics_read(1)[REDIS_TOTALS]
    assert totals["expiries"] >= before + 1
    assert totals["evictions"] >= 0


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="unknown"):
        metrics_record("books", hitz=1)
    with pytest.raises(ValueError, match="namespace"):
        metrics_record("redis:global", hits=1)
    with pytest.raises(ValueError, match="namespace"):
        metrics_record("", hits=1)
