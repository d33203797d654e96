"""The model part of the poison-messages lab: where the attempt counter is raised,
wait schedules, the time budget and the retry wave.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from course.labs.harness.base import Cell, Progress, Tables, table
from course.labs.harness.jsnum import JsLcg, js_round
from course.labs.poison_messages_and_retry.params import PoisonMessagesParams
from messaging.policies import Backoff

# --- 1. where the attempt counter is raised ---------------------------------------

POISON_QUEUE = (1, 2, 3, 4, 5)
LETHAL = frozenset({3})
POISON_THRESHOLD = 3
MAX_RESTARTS = 12
COUNTER_POSITIONS = (("on catch", False), ("at delivery", True))


@dataclass
class _Job:
    id: int
    attempt: int = 0
    status: str = "pending"  # pending | processed | dead


def _lifetime(jobs: list[_Job], *, count_on_delivery: bool) -> tuple[int, bool]:
    """Run one process until it dies or runs out of work: (deliveries, died)."""
    delivered = 0
    for job in [j for j in jobs if j.status == "pending"]:
        delivered += 1
        if count_on_delivery:
            job.attempt += 1
            if job.attempt >= POISON_THRESHOLD:
                job.status = "dead"  # isolated before the work can kill anyone
                continue
        if job.id in LETHAL:
            # The process is gone: a counter in the error handler is never reached.
            return delivered, True
        job.status = "processed"
    return delivered, False


def counter_position_row(label: str, *, count_on_delivery: bool) -> list[Cell]:
    jobs = [_Job(job_id) for job_id in POISON_QUEUE]
    delivered = deaths = restarts = 0
    for restart in range(1, MAX_RESTARTS + 1):
        restarts = restart
        handed_out, died = _lifetime(jobs, count_on_delivery=count_on_delivery)
        delivered += handed_out
        deaths += died
        if all(job.status != "pending" for job in jobs):
            break
    statuses = [job.status for job in jobs]
    return [
        label,
        restarts,
        delivered,
        deaths,
        statuses.count("processed"),
        statuses.count("dead"),
        statuses.count("pending"),
    ]


# --- 2 and 3. wait schedules and the time budget -------------------------------------

SCHEDULE_ATTEMPTS = 8
FIXED_WAIT_MS = 2000
BUDGET_ATTEMPT_LIMIT = 1000  # reaching this many counts as "unlimited"

Schedule = Callable[[int], int]


def schedules(base_ms: int, cap_ms: int) -> tuple[tuple[str, str, Schedule], ...]:
    """Return (budget label, schedule column, wait before attempt n) per schedule."""
    capped = Backoff(base_ms=base_ms, cap_ms=cap_ms)

    def immediate(n: int) -> int:
        return 0

    def fixed(n: int) -> int:
        return FIXED_WAIT_MS

    def exponential(n: int) -> int:
        return base_ms * (1 << (n - 1))

    # Backoff stops doubling after 62 steps; by then base * 2**62 is far past any
    # accepted cap (or 0 when base is 0), so it matches min(cap, base * 2**(n-1)).
    return (
        ("immediate", "immediate", immediate),
        ("fixed 2 s", "fixed_2s", fixed),
        ("exponential", "exponential", exponential),
        ("exponential + cap", "exponential_cap", capped.delay_ms),
    )


def schedule_rows(base_ms: int, cap_ms: int) -> list[list[Cell]]:
    waits = [
        [wait(n) for n in range(1, SCHEDULE_ATTEMPTS + 1)]
        for _, _, wait in schedules(base_ms, cap_ms)
    ]
    rows: list[list[Cell]] = [
        [n, *(column[n - 1] for column in waits)]
        for n in range(1, SCHEDULE_ATTEMPTS + 1)
    ]
    rows.append(["total", *(sum(column) for column in waits)])
    return rows


def budget_row(label: str, wait: Schedule, budget_ms: int) -> list[Cell]:
    elapsed = attempts = 0
    # The next attempt is made only if its wait still fits in what is left.
    while attempts < BUDGET_ATTEMPT_LIMIT and elapsed + wait(attempts + 1) <= budget_ms:
        attempts += 1
        elapsed += wait(attempts)
    shown: Cell = "unlimited" if attempts == BUDGET_ATTEMPT_LIMIT else attempts
    return [label, shown, elapsed]


# --- 4. the retry wave ----------------------------------------------------------------

JITTER_MODES = ("no jitter", "full jitter", "decorrelated jitter")


@dataclass(frozen=True)
class Wave:
    requests: int
    peak: int
    filled_buckets: int
    last_bucket: int


def retry_moments(
    mode: str, *, consumers: int, attempts: int, backoff: Backoff, seed: int
) -> list[float]:
    """Return every consumer's retry moments (ms after the common failure).

    Draws happen consumer by consumer, attempt by attempt, from one generator per
    mode, so each mode sees the same sequence from the start.
    """
    rand = JsLcg(seed).random
    # The un-jittered waits are the same for every consumer: worked out once, not
    # once per consumer (a wave of 10,000 consumers asked for them 400,000 times).
    delays = [backoff.delay_ms(n) for n in range(1, attempts + 1)]
    base, cap = backoff.base_ms, float(backoff.cap_ms)
    moments: list[float] = []
    keep = moments.append
    for _ in range(consumers):
        moment = 0.0
        previous = float(base)
        for delay in delays:
            if mode == "no jitter":
                moment += delay
            elif mode == "full jitter":
                moment += js_round(rand() * delay)  # anywhere in [0, delay]
            else:
                # Decorrelated: the next wait depends on the previous one, not on n.
                spread = previous * 3 - base
                drawn = js_round(base + rand() * spread)
                previous = min(cap, drawn)
                moment += previous
            keep(moment)
    return moments


def bucket_wave(moments: list[float], bucket_ms: int) -> Wave:
    per_bucket: dict[int, int] = {}
    for moment in moments:
        bucket = math.floor(moment / bucket_ms)
        per_bucket[bucket] = per_bucket.get(bucket, 0) + 1
    return Wave(
        requests=len(moments),
        peak=max(per_bucket.values()),
        filled_buckets=len(per_bucket),
        last_bucket=max(per_bucket),
    )


# --- the lab -------------------------------------------------------------------------


def model(params: PoisonMessagesParams, progress: Progress) -> Tables:
    base_ms = params.base_ms
    cap_ms = params.cap_ms
    budget_ms = params.budget_ms
    progress(0.05, "counter position: a message that kills the consumer")
    counter = [
        counter_position_row(label, count_on_delivery=on_delivery)
        for label, on_delivery in COUNTER_POSITIONS
    ]
    progress(0.2, "schedule: waits under four backoff schedules")
    schedule = schedule_rows(base_ms, cap_ms)
    progress(0.3, "budget: attempts that fit in the time budget")
    budget = [
        budget_row(label, wait, budget_ms)
        for label, _, wait in schedules(base_ms, cap_ms)
    ]
    backoff = Backoff(base_ms=base_ms, cap_ms=cap_ms)
    jitter: list[list[Cell]] = []
    for i, mode in enumerate(JITTER_MODES):
        progress(0.4 + 0.2 * i, f"jitter: {mode}")
        wave = bucket_wave(
            retry_moments(
                mode,
                consumers=params.consumers,
                attempts=params.attempts,
                backoff=backoff,
                seed=params.seed,
            ),
            params.bucket_ms,
        )
        jitter.append(
            [mode, wave.requests, wave.peak, wave.filled_buckets, wave.last_bucket]
        )
    columns = [column for _, column, _ in schedules(base_ms, cap_ms)]
    return {
        "counter_position": table(
            [
                "position",
                "restarts",
                "delivered",
                "deaths",
                "processed",
                "dead_letters",
                "remaining",
            ],
            counter,
        ),
        "schedule": table(["attempt", *columns], schedule),
        "budget": table(["schedule", "attempts", "elapsed_ms"], budget),
        "jitter": table(
            [
                "schedule",
                "total_requests",
                "peak_per_bucket",
                "filled_buckets",
                "last_bucket",
            ],
            jitter,
        ),
    }


MAX_RETRY_REQUESTS = 100_000


def check_wave_size(params: PoisonMessagesParams) -> str | None:
    requests = params.consumers * params.attempts
    if requests > MAX_RETRY_REQUESTS:
        return (
            f"consumers * attempts must be at most {MAX_RETRY_REQUESTS:,}, "
            f"got {requests:,}"
        )
    return None
