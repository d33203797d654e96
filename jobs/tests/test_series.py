"""The minute-bucket series store: gauges, counts, tallies, windows and retention.

Real Redis (the run's database, emptied around each test); time is injected.
"""

from __future__ import annotations

import datetime

import pytest

from jobs import series
from jobs.series import (
    BUCKET_LIFETIME_S,
    Kind,
    Sample,
    SeriesSpec,
    sampler_register,
    series_add,
    series_define,
    series_flush,
    series_read,
    series_sample,
    series_totals,
)

UTC = datetime.UTC
# A minute boundary, so "now + k minutes" lands in predictable buckets.
T0 = 1_800_000_000.0 - 1_800_000_000.0 % 60
GAUGE = SeriesSpec(name="test.level", title="Level", unit="jobs", kind=Kind.GAUGE)
COUNT = SeriesSpec(name="test.events", title="Events", unit="events", kind=Kind.COUNT)
TALLY = SeriesSpec(name="test.done", title="Done", unit="rows", kind=Kind.TALLY)


def at(minutes: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(T0 + minutes * 60, tz=UTC)


@pytest.fixture
def store(redis_client, monkeypatch):
    """The test's own registries (the apps' samplers would read the real system)."""
    monkeypatch.setattr(series, "_specs", {})
    monkeypatch.setattr(series, "_samplers", {})
    series_define(GAUGE, COUNT, TALLY)
    series.series_reset()
    yield redis_client
    series.series_reset()


def test_gauges_land_in_the_slots_minute_and_expire_after_three_days(store):
    sampler_register("test", lambda now: [Sample("test.level", "default", 4)])

    run = series_sample(slot=at(2), now=at(2.5))

    assert run.written == 1
    assert run.minute == int(T0 // 60) + 2
    key = f"series:test.level:{run.minute}"
    assert store.hget(key, "default") == b"4"
    # The lifetime is the stated retention, 3 days.
    assert BUCKET_LIFETIME_S == 3 * 86400
    assert BUCKET_LIFETIME_S - 5 <= store.ttl(key) <= BUCKET_LIFETIME_S
    history = series_read(["test.level"], minutes=5, now=T0 + 4 * 60)["test.level"]
    assert history.values == {"default": [None, None, 4.0, None, None]}
    assert history.times()[0] == T0


def test_a_coarser_point_keeps_the_highest_level(store):
    levels = iter([1, 9, 3, 2])
    sampler_register("test", lambda now: [Sample("test.level", "q", next(levels))])
    for minute in range(4):
        series_sample(slot=at(minute))

    history = series_read(["test.level"], minutes=4, step=2, now=T0 + 3 * 60)

    assert history["test.level"].values == {"q": [9.0, 3.0]}
    assert history["test.level"].step == 2


def test_counts_are_buffered_until_flushed_and_read_as_zero_when_absent(store):
    series_add("test.events", "low/full", now=T0)
    series_add("test.events", "low/full", 2, now=T0)
    series_add("test.events", "normal/deadline", now=T0 + 120)
    # Buffered in memory only: no I/O at the event.
    assert store.keys("series:test.events:*") == []

    series_flush()

    assert store.hget(f"series:test.events:{int(T0 // 60)}", "low/full") == b"3"
    history = series_read(["test.events"], minutes=3, now=T0 + 120)["test.events"]
    assert history.values == {
        "low/full": [3.0, 0.0, 0.0],
        "normal/deadline": [0.0, 0.0, 1.0],
    }
    assert series_totals("test.events") == {"low/full": 3, "normal/deadline": 1}


def test_lifetime_totals_only_grow_when_buckets_expire(store):
    series_add("test.events", "low/full", 5, now=T0)
    series_flush()
    store.delete(f"series:test.events:{int(T0 // 60)}")  # the bucket's life ended

    series_add("test.events", "low/full", 1, now=T0 + 60)
    series_flush()

    assert series_totals("test.events") == {"low/full": 6}


def test_a_tally_rewrites_its_minutes_whole(store):
    counts = {"a": 2, "b": 1}
    sampler_register(
        "test",
        lambda now: [
            Sample("test.done", name, n, int(T0 // 60)) for name, n in counts.items()
        ],
    )
    series_sample(slot=at(0))
    counts.pop("b")  # recounted later: the row moved to another minute
    counts["a"] = 3  # and a late commit arrived
    series_sample(slot=at(1))

    history = series_read(["test.done"], minutes=2, now=T0 + 60)["test.done"]

    # Minute 1 was never covered by a tally: unknown, not zero.
    assert history.values == {"a": [3.0, None]}


def test_a_failing_sampler_does_not_blank_the_others(store):
    def broken(now):
        raise RuntimeError("the database went away")

    sampler_register("broken", broken)
    sampler_register("test", lambda now: [Sample("test.level", "q", 1)])

    run = series_sample(slot=at(0))

    assert run.failed == ("broken",)
    assert run.written == 1


def test_unknown_series_and_wrong_kinds_are_refused(store):
    with pytest.raises(ValueError, match="unknown series"):
        series_add("test.nothing", "x")
    with pytest.raises(ValueError, match="is a gauge"):
        series_add("test.level", "x")
    with pytest.raises(ValueError, match="already defined differently"):
        series_define(
            SeriesSpec(name="test.level", title="Other", unit="x", kind=Kind.GAUGE)
        )
    with pytest.raises(ValueError, match="without ':'"):
        SeriesSpec(name="a:b", title="", unit="", kind=Kind.GAUGE)


def test_points_are_aligned_on_their_step(store):
    series_add("test.events", "x", now=T0 + 9 * 60)
    series_flush()

    # 6 minutes in steps of 4: the points start on multiples of 4 minutes.
    first = series_read(["test.events"], minutes=6, step=4, now=T0 + 9 * 60)
    later = series_read(["test.events"], minutes=6, step=4, now=T0 + 11 * 60)

    assert first["test.events"].start % 4 == 0
    assert first["test.events"].start == later["test.events"].start
    assert first["test.events"].values == later["test.events"].values


def test_rollups_give_the_same_points_as_the_minutes(store):
    levels = iter([3, 8, 1, 5, 2, 7, 4, 6, 0, 9, 2, 1])
    sampler_register(
        "test",
        lambda now: [
            Sample("test.level", "q", next(levels)),
            Sample("test.done", "a", 2, int(now.timestamp() // 60)),
        ],
    )
    for minute in range(12):
        series_sample(slot=at(minute), now=at(minute))
        series_add("test.events", "x", minute, now=T0 + minute * 60)
    series_flush()
    names = ["test.level", "test.events", "test.done"]
    end = T0 + 19 * 60

    by_minutes = series_read(names, minutes=20, step=5, now=end)  # minute buckets
    by_rollups = series_read(names, minutes=20, step=10, now=end)  # 10-min blocks

    assert by_rollups["test.level"].values == {"q": [9.0, 2.0]}
    assert by_rollups["test.events"].values == {"x": [45.0, 21.0]}
    assert by_rollups["test.done"].values == {"a": [20.0, 4.0]}
    assert store.exists(f"series:test.level:r10:{int(T0 // 60) // 10}")
    # Two 5-minute points add up to each 10-minute one.
    events = [value or 0.0 for value in by_minutes["test.events"].values["x"]]
    assert [events[0] + events[1], events[2] + events[3]] == [45.0, 21.0]


def test_a_rewritten_tally_rewrites_its_rollup(store):
    counts = {"a": 5}
    sampler_register(
        "test",
        lambda now: [
            Sample("test.done", n, v, int(T0 // 60)) for n, v in counts.items()
        ],
    )
    series_sample(slot=at(0))
    counts["a"] = 1  # recounted lower: the rollup must follow, not add up
    series_sample(slot=at(1))

    rolled = series_read(["test.done"], minutes=10, step=10, now=T0 + 9 * 60)

    assert rolled["test.done"].values == {"a": [1.0]}
