"""Lab for "Poison Messages and Retry": counter placement, backoff and jitter.

Model part, four measurements:

1. ``counter_position`` — five messages, the third kills the consumer process; the
   process is restarted up to twelve times. With the attempt counter raised in the
   error handler the handler never runs, so the threshold of three is never reached;
   raised on delivery, the third delivery isolates the message before the work.
   Fixed, as the course prints it.
2. ``schedule`` — the wait before attempts 1 to 8 under four schedules (none, a fixed
   2 s, ``base_ms * 2**(n-1)``, and the same capped at ``cap_ms``) and their sums.
3. ``budget`` — how many attempts fit in ``budget_ms`` of waiting under each schedule
   (``unlimited`` when a thousand fit) and the wait used by then.
4. ``jitter`` — ``consumers`` consumers fail at the same instant and retry
   ``attempts`` times; their retry moments are counted per ``bucket_ms`` slot with no
   jitter, full jitter and decorrelated jitter, drawing from the course's generator
   seeded with ``seed``.

The capped exponential wait is the system's own policy, ``messaging.policies.Backoff``.
The system's ``full_jitter_ms`` truncates its draw, while the course rounds half up,
so the jitter experiment draws its waits here on top of ``Backoff.delay_ms``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.jsnum import SEED_MAX, JsLcg, js_round
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
    moments: list[float] = []
    for _ in range(consumers):
        moment = 0.0
        previous = float(backoff.base_ms)
        for n in range(1, attempts + 1):
            delay = backoff.delay_ms(n)
            if mode == "no jitter":
                moment += delay
            elif mode == "full jitter":
                moment += js_round(rand() * delay)  # anywhere in [0, delay]
            else:
                # Decorrelated: the next wait depends on the previous one, not on n.
                spread = previous * 3 - backoff.base_ms
                drawn = js_round(backoff.base_ms + rand() * spread)
                previous = min(float(backoff.cap_ms), drawn)
                moment += previous
            moments.append(moment)
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


def model(params: Params, progress: Progress) -> Tables:
    base_ms = int_param(params, "base_ms")
    cap_ms = int_param(params, "cap_ms")
    budget_ms = int_param(params, "budget_ms")
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
                consumers=int_param(params, "consumers"),
                attempts=int_param(params, "attempts"),
                backoff=backoff,
                seed=int_param(params, "seed"),
            ),
            int_param(params, "bucket_ms"),
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


def _check_wave_size(params: Params) -> str | None:
    requests = int_param(params, "consumers") * int_param(params, "attempts")
    if requests > MAX_RETRY_REQUESTS:
        return (
            f"consumers * attempts must be at most {MAX_RETRY_REQUESTS:,}, "
            f"got {requests:,}"
        )
    return None


# --- live part ---------------------------------------------------------------------


def live(params: Params, progress: Progress) -> Tables:
    """Five real probes, #3 kills every work-horse that runs it; count the claims.

    The spine raises the attempt counter when it claims a delivery, before the work,
    so #3's count grows although its worker never records a failure. With the
    system's ``max_attempts`` of 3, a delivery whose earlier attempts killed their
    worker is isolated when its claim reaches the threshold: the handler runs on
    claims 1 and 2 (each one a death) and claim 3 sends it to the dead letters
    without running it, as in the course.
    """
    from course.labs import live as harness
    from messaging.models import DeadLetter
    from messaging.models import Delivery as DeliveryRow

    run = harness.new_run_id()
    with harness.live_system(run=run, progress=progress) as system:
        harness.live_step(progress, 0.1, "five probes, #3 kills its worker")
        ids = harness.publish_probes(run, POISON_QUEUE, crash_always=LETHAL)
        harness.wait_until(
            lambda: harness.deliveries_settled(ids.values()),
            what="the poison probes",
            timeout=60,
            system=system,
            detail=lambda: f"{harness.attempts_total(ids.values())} claims so far",
        )
        deliveries = {
            row.message_id: row for row in harness.probe_deliveries(ids.values())
        }
        letters = {
            letter.delivery.message_id: letter
            for letter in DeadLetter.objects.filter(
                delivery__in=list(deliveries.values())
            ).select_related("delivery")
        }
    deaths = 0
    claim_rows: list[list[Cell]] = []
    for seq in POISON_QUEUE:
        row = deliveries[ids[seq]]
        letter = letters.get(row.message_id)
        if letter is not None and "worker died" in letter.last_error:
            # Every claim but the last ran the handler and lost its process.
            deaths += row.attempts - 1
        outcome = row.status
        if letter is not None:
            outcome = f"dead letter: {letter.last_error}"
        claim_rows.append([seq, row.attempts, outcome])
    processed = sum(
        1 for row in deliveries.values() if row.status == DeliveryRow.Status.DONE
    )
    return {
        "live_counter_position": table(
            ["position", "deaths", "processed", "dead_letters"],
            [["at claim (live system)", deaths, processed, len(letters)]],
        ),
        "live_claims": table(["message", "claims", "outcome"], claim_rows),
    }


LAB = Lab(
    slug="poison-messages-and-retry",
    title="Poison Messages and Retry",
    params=(
        Param(
            "base_ms",
            "int",
            500,
            "first exponential wait",
            minimum=0,
            maximum=1_000_000,
        ),
        Param(
            "cap_ms",
            "int",
            30_000,
            "longest wait of the capped schedules",
            minimum=0,
            maximum=100_000_000,
        ),
        Param(
            "budget_ms",
            "int",
            300_000,
            "time budget for waiting between attempts",
            minimum=0,
            maximum=1_000_000_000,
        ),
        Param(
            "consumers",
            "int",
            200,
            "consumers failing at the same instant",
            minimum=1,
            maximum=10_000,
        ),
        Param("attempts", "int", 4, "retries per consumer", minimum=1, maximum=100),
        Param(
            "bucket_ms",
            "int",
            100,
            "width of a counting slot",
            minimum=1,
            maximum=1_000_000,
        ),
        Param(
            "seed",
            "int",
            20250720,
            "seed of the course's generator",
            minimum=0,
            maximum=SEED_MAX,
        ),
    ),
    model=model,
    live=live,
    combination_check=_check_wave_size,
    charts=(
        Chart(
            table="jitter",
            label="schedule",
            values=("peak_per_bucket",),
            title="Busiest slot of the retry wave",
            unit="requests",
        ),
        Chart(
            table="jitter",
            label="schedule",
            values=("filled_buckets",),
            title="Slots the retry wave is spread over",
            unit="slots",
        ),
        Chart(
            table="counter_position",
            label="position",
            values=("deaths", "processed", "dead_letters", "remaining"),
            title="Where the attempt counter is raised",
            unit="count",
        ),
    ),
)
