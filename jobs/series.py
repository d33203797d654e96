"""Operational time series in Redis minute buckets, and the registries apps fill.

Each app declares the series it owns (``series_define``) and, if it measures levels,
a sampler (``sampler_register``), from its ``AppConfig.ready``; this module knows no
domain. The scheduler runs ``series_sample`` once a minute (``jobs.periodic``) in
its own process, so a queue that is backed up cannot delay the sample measuring it.

Three kinds of series, because "nothing recorded" means different things:

- ``GAUGE``: a level measured at one instant (queue depth, age of the oldest job). A
  minute without a sample is unknown (``None``: the sampler did not run); a point
  that covers several minutes keeps the highest, so a short spike stays visible.
- ``COUNT``: events counted where they happen (shed requests). A minute without an
  event is 0; a point adds its minutes. Recording is an in-process dictionary
  update; ``series_flush`` sends the buffer in one pipeline (the caller decides
  when, off any event loop), and also adds to a lifetime total per label that is
  never trimmed, which Prometheus reads as a monotonic counter.
- ``TALLY``: events counted afterwards from timestamps the database keeps (deliveries
  done, letters gone dead). Each sample rewrites the last few minutes whole, so a
  row committed late or a missed run is counted exactly once; a minute no sample
  covered is unknown (``None``).

Layout: ``series:<name>:<minute>`` is a hash, field = label (a queue, a subscription,
``critical/full``), value = the number; it expires ``BUCKET_LIFETIME_S`` (3 days, as
the cache's buckets) after its last write. ``series:<name>:r10:<block>`` holds the
same per ``ROLLUP`` (10) minutes, kept up at every write (the highest level, the
summed counts), so a 3-day chart reads 432 hashes per series instead of 4,320.
``series:<name>:total`` holds the lifetime totals of a ``COUNT``.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, cast

import redis
from django.conf import settings
from django.utils import timezone
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

__all__ = [
    "BUCKET_LIFETIME_S",
    "BUCKET_S",
    "History",
    "Kind",
    "Sample",
    "SampleRun",
    "SeriesSpec",
    "sampler_register",
    "series_add",
    "series_define",
    "series_flush",
    "series_read",
    "series_redis",
    "series_reset",
    "series_sample",
    "series_specs",
    "series_totals",
    "window_minutes_range",
]

logger = logging.getLogger(__name__)

BUCKET_S: Final = 60
# The same life as the cache's buckets (library.cache.metrics): the history pages
# offer windows up to 3 days, and nothing older is kept anywhere.
BUCKET_LIFETIME_S: Final = 3 * 24 * 60 * 60
KEY_PREFIX: Final = "series"
# Minutes per rollup bucket; a read whose step is a multiple of it uses the rollups.
ROLLUP: Final = 10


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNT = "count"
    TALLY = "tally"


@dataclass(frozen=True)
class SeriesSpec:
    """What a series measures, as the history page and the exporter describe it."""

    name: str  # "<app>.<what>", no ":" (it separates the parts of a key)
    title: str
    unit: str  # of one value: "jobs", "s", or what a COUNT/TALLY counts
    kind: Kind
    description: str = ""
    # COUNT/TALLY: the page shows events per this many minutes (60: per hour).
    per_minutes: int = 1

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name:
            raise ValueError(f"a series name is non-empty, without ':': {self.name!r}")
        if self.per_minutes < 1:
            raise ValueError("per_minutes is at least 1")


@dataclass(frozen=True)
class Sample:
    """One value of one label; ``minute`` (since the epoch) only for a TALLY."""

    series: str
    label: str
    value: float
    minute: int | None = None


Sampler = Callable[[datetime.datetime], Iterable[Sample]]

_specs: dict[str, SeriesSpec] = {}
_samplers: dict[str, Sampler] = {}


def series_define(*specs: SeriesSpec) -> None:
    """Declare series; declaring the same spec again (a second ``ready``) is a no-op."""
    for spec in specs:
        known = _specs.get(spec.name)
        if known is not None and known != spec:
            raise ValueError(f"series {spec.name!r} is already defined differently")
        _specs[spec.name] = spec


def series_specs() -> list[SeriesSpec]:
    """Return every declared series, in the order the apps declared them."""
    return list(_specs.values())


def sampler_register(name: str, sampler: Sampler) -> None:
    """Register ``sampler`` under ``name``; ``series_sample`` calls it each minute."""
    _samplers[name] = sampler


# --- Redis --------------------------------------------------------------------------

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def series_redis() -> redis.Redis:
    """Return this process's client for the series (one per ``REDIS_URL``).

    Short timeouts, as the cache's client: a history write that waits on a sick
    server would stall the scheduler or a daphne's flush thread instead.
    """
    url: str = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        with _clients_lock:
            client = _clients.setdefault(
                url,
                redis.Redis.from_url(
                    url,
                    socket_connect_timeout=0.5,
                    socket_timeout=2.0,
                    retry=Retry(ExponentialBackoff(cap=0.05, base=0.005), 1),
                    health_check_interval=30,
                ),
            )
    return client


def _minute(epoch_s: float) -> int:
    return int(epoch_s // BUCKET_S)


def _key(name: str, minute: int) -> str:
    return f"{KEY_PREFIX}:{name}:{minute}"


def _rollup_key(name: str, block: int) -> str:
    return f"{KEY_PREFIX}:{name}:r{ROLLUP}:{block}"


# Keep the higher of the stored and the new value of each label, in one round trip
# on one key (so it stays valid on a Redis cluster).
_MAX_MERGE = """
for i = 2, #ARGV, 2 do
  local stored = redis.call('HGET', KEYS[1], ARGV[i])
  if not stored or tonumber(stored) < tonumber(ARGV[i + 1]) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
"""


def _total_key(name: str) -> str:
    return f"{KEY_PREFIX}:{name}:total"


def _spec(name: str, *kinds: Kind) -> SeriesSpec:
    spec = _specs.get(name)
    if spec is None:
        raise ValueError(f"unknown series {name!r} (declare it with series_define)")
    if spec.kind not in kinds:
        raise ValueError(f"series {name!r} is a {spec.kind}, not {'/'.join(kinds)}")
    return spec


# --- counting at the event ----------------------------------------------------------

_buffer: defaultdict[tuple[str, int], defaultdict[str, int]] = defaultdict(
    lambda: defaultdict(int)
)
_buffer_lock = threading.Lock()


def series_add(
    name: str, label: str, amount: int = 1, *, now: float | None = None
) -> None:
    """Add ``amount`` to ``label`` of the COUNT ``name`` for the current minute.

    No I/O: safe on an event loop. ``now`` (seconds since the epoch) places the event
    in a minute; tests inject it.
    """
    _spec(name, Kind.COUNT)
    minute = _minute(time.time() if now is None else now)
    with _buffer_lock:
        _buffer[(name, minute)][label] += amount


def series_flush() -> None:
    """Send the buffered counts to Redis in one pipeline and empty the buffer.

    Blocking: call it from a thread, never on an event loop. A batch Redis refuses is
    dropped: holding counts back without bound while Redis is down would be a leak,
    and the history is an estimate (the lifetime totals then miss it as well).
    """
    global _buffer
    with _buffer_lock:
        batch, _buffer = _buffer, defaultdict(lambda: defaultdict(int))
    if not batch:
        return
    try:
        pipe = series_redis().pipeline(transaction=False)
        for (name, minute), labels in batch.items():
            key = _key(name, minute)
            rollup = _rollup_key(name, minute // ROLLUP)
            for label, amount in labels.items():
                pipe.hincrby(key, label, amount)
                pipe.hincrby(rollup, label, amount)
                pipe.hincrby(_total_key(name), label, amount)
            pipe.expire(key, BUCKET_LIFETIME_S)
            pipe.expire(rollup, BUCKET_LIFETIME_S)
        pipe.execute()
    except redis.RedisError as error:
        logger.warning("series: dropped %d buffered buckets: %s", len(batch), error)


def _flush_at_exit() -> None:
    try:
        series_flush()
    except Exception:  # exiting: nothing useful is left to do with it
        logger.debug("series: final flush failed", exc_info=True)


atexit.register(_flush_at_exit)


def series_totals(name: str) -> dict[str, int]:
    """Return the lifetime totals of the COUNT ``name`` per label (all processes).

    This process's buffered counts are flushed first, so they are included.
    """
    _spec(name, Kind.COUNT)
    series_flush()
    raw = cast(dict[bytes, bytes], series_redis().hgetall(_total_key(name)))
    return {label.decode(): int(value) for label, value in raw.items()}


# --- sampling -----------------------------------------------------------------------


@dataclass(frozen=True)
class SampleRun:
    minute: int
    written: int  # samples stored
    failed: tuple[str, ...]  # samplers that raised (logged; the others still ran)


def series_sample(
    *, slot: datetime.datetime | None = None, now: datetime.datetime | None = None
) -> SampleRun:
    """Run every registered sampler and store what they measured, in one pipeline.

    ``slot`` (the scheduler's run instant) names the minute the gauges belong to, so
    a run started a few seconds late still lands on its own minute; ``now`` is the
    instant ages are measured from (both default to the current time). A sampler
    that fails is logged and skipped: one sick source must not blank the others.
    Redis errors propagate, so the scheduler records the run as failed.
    """
    now = now or timezone.now()
    minute = _minute((slot or now).timestamp())
    samples: list[Sample] = []
    failed: list[str] = []
    for name, sampler in _samplers.items():
        try:
            samples.extend(sampler(now))
        except Exception:
            logger.exception("series: sampler %s failed", name)
            failed.append(name)
    gauges: defaultdict[str, dict[str, float]] = defaultdict(dict)
    tallies: defaultdict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for sample in samples:
        spec = _spec(sample.series, Kind.GAUGE, Kind.TALLY)
        if spec.kind is Kind.GAUGE:
            gauges[sample.series][sample.label] = sample.value
        else:
            at = minute if sample.minute is None else sample.minute
            tallies[(sample.series, at)][sample.label] = sample.value
    client = series_redis()
    rollups = _tally_rollups(client, tallies)
    max_merge = client.register_script(_MAX_MERGE)
    # MULTI: a reader never sees a tally bucket between its DEL and its HSET.
    pipe = client.pipeline(transaction=True)
    for name, values in gauges.items():
        pipe.hset(_key(name, minute), mapping=values)  # type: ignore[arg-type]
        pipe.expire(_key(name, minute), BUCKET_LIFETIME_S)
        flat = [part for label, value in values.items() for part in (label, value)]
        max_merge(
            keys=[_rollup_key(name, minute // ROLLUP)],
            args=[BUCKET_LIFETIME_S, *flat],
            client=pipe,
        )
    for (name, at), values in tallies.items():
        # Rewritten whole: a label counted before but absent now (a letter that
        # died again later moved to a newer minute) must not keep its old count.
        pipe.delete(_key(name, at))
        if values:
            pipe.hset(_key(name, at), mapping=values)  # type: ignore[arg-type]
            pipe.expire(_key(name, at), BUCKET_LIFETIME_S)
    for (name, block), sums in rollups.items():
        pipe.delete(_rollup_key(name, block))
        if sums is not None:
            pipe.hset(_rollup_key(name, block), mapping=sums)  # type: ignore[arg-type]
            pipe.expire(_rollup_key(name, block), BUCKET_LIFETIME_S)
    pipe.execute()
    return SampleRun(minute=minute, written=len(samples), failed=tuple(failed))


def _tally_rollups(
    client: redis.Redis,
    tallies: dict[tuple[str, int], dict[str, float]],
) -> dict[tuple[str, int], dict[str, float] | None]:
    """Return the new sums of every rollup block a tally rewrites (None: no minute
    of the block is covered), from its stored minutes and the rewritten ones."""
    blocks = sorted({(name, at // ROLLUP) for name, at in tallies})
    pipe = client.pipeline(transaction=False)
    for name, block in blocks:
        for minute in range(block * ROLLUP, (block + 1) * ROLLUP):
            pipe.hgetall(_key(name, minute))
    stored = cast(list[dict[bytes, bytes]], pipe.execute())
    sums: dict[tuple[str, int], dict[str, float] | None] = {}
    for index, (name, block) in enumerate(blocks):
        total: defaultdict[str, float] = defaultdict(float)
        covered = False
        minutes = stored[index * ROLLUP : (index + 1) * ROLLUP]
        for offset, bucket in enumerate(minutes):
            minute = block * ROLLUP + offset
            if (name, minute) in tallies:
                values = tallies[(name, minute)]
            else:
                values = {k.decode(): float(v) for k, v in bucket.items()}
            covered = covered or bool(values)
            for label, value in values.items():
                total[label] += value
        sums[(name, block)] = dict(total) if covered else None
    return sums


# --- reading ------------------------------------------------------------------------


@dataclass(frozen=True)
class History:
    """Points of one series: ``values[label][i]`` covers ``step`` minutes from
    ``start + i * step`` (minutes since the epoch)."""

    spec: SeriesSpec
    start: int
    step: int
    count: int
    values: dict[str, list[float | None]]

    def times(self) -> list[int]:
        """Return each point's start in seconds since the epoch."""
        return [(self.start + i * self.step) * BUCKET_S for i in range(self.count)]


def window_minutes_range(
    minutes: int, step: int, now: float | None = None
) -> tuple[int, int]:
    """Return (first, count) of the points covering the last ``minutes`` minutes.

    Points start on multiples of ``step`` so a point always holds the same minutes
    whatever the moment of the read; the last one holds the current minute.
    """
    if minutes < 1 or step < 1:
        raise ValueError("a window and a step are at least one minute")
    last = _minute(time.time() if now is None else now)
    first = (last - minutes + 1) // step * step
    return first, (last - first) // step + 1


def series_read(
    names: Sequence[str], *, minutes: int, step: int = 1, now: float | None = None
) -> dict[str, History]:
    """Return the last ``minutes`` minutes of each series in points of ``step`` minutes.

    This process's buffered counts are flushed first. Labels are those seen in the
    window; a series without any data has no label. Redis errors propagate.
    """
    series_flush()
    specs = [_spec(name, *Kind) for name in names]
    first, count = window_minutes_range(minutes, step, now)
    # Points of whole rollup blocks (the first starts on a multiple of step, hence
    # of ROLLUP) read the blocks; they aggregate exactly as their minutes would.
    rolled = step % ROLLUP == 0
    per_point = step // ROLLUP if rolled else step
    start = first // ROLLUP if rolled else first
    buckets_read = range(start, start + count * per_point)
    pipe = series_redis().pipeline(transaction=False)
    for spec in specs:
        for bucket in buckets_read:
            key = _rollup_key(spec.name, bucket) if rolled else _key(spec.name, bucket)
            pipe.hgetall(key)
    replies = cast(list[dict[bytes, bytes]], pipe.execute())
    found: dict[str, History] = {}
    span = len(buckets_read)
    for index, spec in enumerate(specs):
        buckets = replies[index * span : (index + 1) * span]
        points = _points(spec, per_point, count, buckets)
        found[spec.name] = History(
            spec=spec, start=first, step=step, count=count, values=points
        )
    return found


def _points(
    spec: SeriesSpec,
    step: int,
    count: int,
    buckets: list[dict[bytes, bytes]],
) -> dict[str, list[float | None]]:
    """Group ``step`` buckets per point, as the kind says (see the module doc)."""
    labels = sorted({label.decode() for bucket in buckets for label in bucket})
    values: dict[str, list[float | None]] = {}
    for label in labels:
        field = label.encode()
        points: list[float | None] = []
        for index in range(count):
            chunk = buckets[index * step : (index + 1) * step]
            present = [float(bucket[field]) for bucket in chunk if field in bucket]
            if spec.kind is Kind.GAUGE:
                points.append(max(present) if present else None)
            elif spec.kind is Kind.COUNT:
                points.append(sum(present))  # no event in a minute is a real 0
            else:
                # A minute no sample covered is unknown; the tally rewrote every
                # label of the minutes it covered, so "absent" there means 0.
                covered = [bucket for bucket in chunk if bucket]
                points.append(
                    sum(float(bucket.get(field, 0)) for bucket in covered)
                    if covered
                    else None
                )
        values[label] = points
    return values


def series_reset(name: str | None = None) -> None:
    """Forget the buckets and totals of ``name`` (default: every series); for tests
    and for an operator starting a clean measurement."""
    global _buffer
    with _buffer_lock:
        _buffer = defaultdict(lambda: defaultdict(int))
    client = series_redis()
    pattern = f"{KEY_PREFIX}:{name}:*" if name else f"{KEY_PREFIX}:*"
    # SCAN, not KEYS: a reset on a live server must not block it.
    doomed = list(client.scan_iter(match=pattern, count=500))
    for start in range(0, len(doomed), 500):
        client.delete(*doomed[start : start + 500])
