"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

from collections import deque

from course.labs.backpressure.params import BackpressureParams
from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.queueing import (
    MILLISECONDS,
    UNSTABLE,
    bounded_columns,
    bounded_rows,
    scenario_of,
)
from jobs.backpressure import Policy

POLICIES = ("unbounded", "tail-drop", "head-drop", "block")
POLICY_COLUMNS = [
    "policy",
    "produced",
    "delivered",
    "dropped",
    "remaining",
    "peak",
    "longest_wait_ms",
    "producer_wait_ms",
]
# The live table adds the mean wait of the delivered jobs: one slow fork of a work
# horse moves the longest wait a lot, and the mean hardly.
LIVE_POLICY_COLUMNS = [*POLICY_COLUMNS, "average_wait_ms"]
# stream.mjs
CHUNK_BYTES = 1024
CHUNK_COUNT = 64
HIGH_WATER_MARK = 16 * 1024
# live
LIVE_WORKERS = 2
LIVE_POLICY: dict[str, Policy] = {
    "unbounded": "drop_newest",
    "tail-drop": "drop_newest",
    "head-drop": "drop_oldest",
    "block": "block",
}
UNBOUNDED = 10**9
VARIABILITY_COLUMNS = bounded_columns(
    MILLISECONDS, drop="tail_drop_pct", wait="tail_drop_p99_wait_ms"
)
UNSTABLE_UNBOUNDED = (
    "the unbounded queue is " + UNSTABLE + "; the bounded one stays stable by "
    "refusing what does not fit"
)
STOPPED = "the consumer is stopped: nothing is served at any load"


def variability(params: BackpressureParams) -> list[list[Cell]]:
    """The variability rows: one consumer at ``consume_per_s``, times in ms."""
    loads = params.utilisations
    consume = params.consume_per_s
    if consume == 0:
        # No service rate: a load is a share of nothing; the table says so.
        empty: list[Cell] = [None] * (len(VARIABILITY_COLUMNS) - 2)
        return [[pct, *empty, STOPPED] for pct in loads]
    scenario = scenario_of(params, servers=1, mean_service=1000 / consume)
    return bounded_rows(
        scenario,
        loads,
        MILLISECONDS,
        capacity=params.capacity,
        unstable_note=UNSTABLE_UNBOUNDED,
    )


def simulate(
    policy: str, *, window: int, produce: int, consume: int, capacity: int
) -> list[Cell]:
    """Return one ``policies`` row: the course's ``run(policy)``."""
    queue: deque[int] = deque()
    produced = delivered = dropped = blocked = 0
    peak = longest_wait = 0
    produce_acc = consume_acc = 0
    for t in range(1, window + 1):
        produce_acc += produce
        while produce_acc >= 1000:
            produce_acc -= 1000
            produced += 1
            if policy == "unbounded" or len(queue) < capacity:
                queue.append(t)
            elif policy == "tail-drop":
                dropped += 1
            elif policy == "head-drop":
                queue.popleft()
                dropped += 1
                queue.append(t)
            else:  # block: the producer waits
                produced -= 1
                produce_acc += 1000
                blocked += 1
                break
        consume_acc += consume
        while consume_acc >= 1000 and queue:
            consume_acc -= 1000
            longest_wait = max(longest_wait, t - queue.popleft())
            delivered += 1
        peak = max(peak, len(queue))
    return [
        policy,
        produced,
        delivered,
        dropped,
        len(queue),
        peak,
        longest_wait,
        blocked,
    ]


def writable(*, listening: bool) -> tuple[int, int]:
    """Return (full signals, buffer peak bytes) of stream.mjs's producer."""
    length = 0  # writableLength: buffered bytes, the chunk being written included
    full_signals = peak = 0
    for _ in range(CHUNK_COUNT):
        length += CHUNK_BYTES
        has_room = length < HIGH_WATER_MARK
        peak = max(peak, length)
        if not has_room:
            full_signals += 1
            if listening:
                length = 0  # "drain": everything buffered has been written
    return full_signals, peak


def model(params: BackpressureParams, progress: Progress) -> Tables:
    window = params.window_ms
    produce = params.produce_per_s
    consume = params.consume_per_s
    capacity = params.capacity
    rows: list[list[Cell]] = []
    for index, policy in enumerate(POLICIES):
        progress(index / 5, f"policy {policy}")
        rows.append(
            simulate(
                policy,
                window=window,
                produce=produce,
                consume=consume,
                capacity=capacity,
            )
        )
    progress(0.6, "variability: random arrivals and job lengths")
    variability_rows = variability(params)
    progress(0.9, "stream write() and drain")
    signal_rows: list[list[Cell]] = []
    for mode in ("listening", "ignoring"):
        full, peak = writable(listening=mode == "listening")
        signal_rows.append([mode, full, peak])
    return {
        "policies": table(POLICY_COLUMNS, rows),
        "producer_signal": table(
            ["mode", "full_signals", "buffer_peak_bytes"], signal_rows
        ),
        "variability": table(VARIABILITY_COLUMNS, variability_rows),
    }
