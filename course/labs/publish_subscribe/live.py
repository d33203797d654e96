"""The live part of the publish-subscribe lab: the same four questions asked of the
outbox and its real subscriptions on real rq worker processes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from course.instruments.probes import LAB_PROBE
from course.labs.harness import live as harness
from course.labs.harness import live_streams as helpers
from course.labs.harness.base import (
    Cell,
    LivePart,
    Progress,
    Tables,
    table,
)
from course.labs.harness.live import PROBE_SUBSCRIPTION
from course.labs.publish_subscribe.model import (
    FAN_OUT_EVENTS,
    LATE_AFTER_JOINING,
    LATE_BEFORE_JOINING,
)
from course.labs.publish_subscribe.params import PublishSubscribeParams
from course.models import ProbeEffect
from messaging.models import Delivery, OutboxMessage
from messaging.registry import SUBSCRIPTIONS, MessageType
from messaging.services import subscription_start, subscription_states

if TYPE_CHECKING:
    from course.labs.harness.live import LiveSystem

# --- live part ---------------------------------------------------------------------

LAB_SLOW = "lab_slow"
LAB_LATE = "lab_late"
# One model time unit on real processes: the slow copy sleeps slow_duration units,
# a round lasts budget units.
LIVE_UNIT_MS = 50
LIVE_MAX_MESSAGES = 200
LIVE_MAX_ROUND_MS = 2_000
LIVE_MAX_SLOW_WORK_S = 20.0
LIVE_MIXED = 8  # the filter run: lab probes and library stock-takes, alternating


def live_check(params: PublishSubscribeParams) -> str | None:
    """Refuse more slow-subscriber work than real processes finish in time."""
    messages = params.rounds * params.per_round
    slow_ms = params.slow_duration * LIVE_UNIT_MS
    if messages > LIVE_MAX_MESSAGES:
        return (
            f"live: at most {LIVE_MAX_MESSAGES} slow-subscriber messages on real "
            f"processes, got {params.rounds} x {params.per_round}"
        )
    if params.budget * LIVE_UNIT_MS > LIVE_MAX_ROUND_MS:
        return (
            f"live: a round lasts budget x {LIVE_UNIT_MS} ms; at most "
            f"{LIVE_MAX_ROUND_MS} ms, got budget {params.budget}"
        )
    if messages * slow_ms / 1000 > LIVE_MAX_SLOW_WORK_S:
        return (
            f"live: the slow subscriber's work (messages x slow_duration x "
            f"{LIVE_UNIT_MS} ms) must stay under {LIVE_MAX_SLOW_WORK_S:g} s"
        )
    return None


@dataclass(frozen=True)
class FanOut:
    subscriptions: list[str]  # active when the row's probes were published
    published: int
    copies: int
    delivered: int


@dataclass(frozen=True)
class Round:
    """Both subscriptions at the end of one round of the slow-subscriber run."""

    number: int
    published: int  # so far
    lab_probe_done: int
    lab_slow_done: int
    lab_probe_ms: int | None  # when lab_probe had done every copy (None: not yet)
    elapsed_ms: int
    unrelayed: int


@dataclass(frozen=True)
class Drained:
    published: int
    lab_probe_done: int
    lab_slow_done: int
    after_ms: int


@dataclass(frozen=True)
class Filtered:
    type: str
    published: int
    subscriptions: int  # active during the run
    copies: int
    copied_to: list[str]


@dataclass(frozen=True)
class LateStep:
    stage: str
    published: int
    lab_probe_done: int
    lab_late_seen: int | None


@dataclass(frozen=True)
class Measurement:
    fan_out: list[FanOut]
    rounds: list[Round]
    drained: Drained
    filtered: list[Filtered]
    late: list[LateStep]


def measure(params: PublishSubscribeParams, progress: Progress) -> Measurement:
    """Ask the real subscriptions the lesson's four questions.

    The topic is the outbox; a subscription's copies are its ``Delivery`` rows,
    written by the relay for each active subscription whose filter accepts the type
    and which started before the message. ``lab_probe`` is always active;
    ``lab_slow`` (its own lane, one worker at most, sleeps ``slow_ms``) and
    ``lab_late`` are started by this run and left paused at the end, however it ends.

    1. ``live_fan_out`` — four probes per row, published after starting one more
       subscription: copies are counted rows, delivered the ones done.
    2. ``live_slow_subscriber`` — ``lab_probe`` and ``lab_slow``; each round publishes
       ``per_round`` probes whose ``lab_slow`` copy sleeps ``slow_duration`` x 50 ms
       and snapshots both subscriptions ``budget`` x 50 ms later; ``lab_probe_ms``
       is when ``lab_probe`` had done all its copies, ``elapsed_ms`` the time since
       the first publish, ``unrelayed`` the messages without copies yet (pending
       counts them: a subscription has not processed them either). Wall-clock
       time on a real machine, so the numbers vary from run to run; what does
       not: one worker at most in the slow lane, so ``lab_slow`` finishes no more
       than ``elapsed_ms / slow_ms`` copies and its backlog grows, while
       ``lab_probe``'s copies are done by other workers. ``live_slow_drained``
       waits for the backlog to empty. The lane isolates workers, not the
       database: the slow handler sleeps inside its transaction, which on SQLite
       holds the single write lock for the whole sleep. The relay
       and ``lab_probe``'s commits then wait, and a waiting writer often loses the
       lock again to the slow lane's next copy: on SQLite ``lab_probe`` and even the
       relay can fall behind with ``lab_slow`` (``unrelayed`` above 0, rounds with no
       ``lab_probe_ms``). On PostgreSQL the sleep holds row locks only.
    3. ``live_filter`` — every subscription active; lab probes and library
       stock-takes (``stock_correct`` to the count the shelf already has) in turn.
       ``not_copied`` are copies a filter-less topic would have written.
    4. ``live_late_subscriber`` — three probes, then ``lab_late`` starts, then two:
       ``lab_late``'s effects (``ProbeEffect`` rows of mode ``lab_late``) number two.
    """
    slow_ms = params.slow_duration * LIVE_UNIT_MS
    books = helpers.recount_books()
    run = harness.new_run_id()

    def pause_lab_subscriptions() -> None:
        for name in (LAB_SLOW, LAB_LATE):
            subscription_start(name, active=False)

    try:
        pause_lab_subscriptions()
        with harness.live_system(run=run, progress=progress) as system:
            probes = _Probes(run, system)
            harness.live_step(progress, 0.1, "fan_out: one more subscription a row")
            fan_out = _live_fan_out(probes)
            harness.live_step(progress, 0.3, "slow_subscriber: lab_slow's own lane")
            subscription_start(LAB_LATE, active=False)
            rounds, drained = _live_slow(
                probes, params.rounds, params.per_round, params.budget, slow_ms
            )
            harness.live_step(progress, 0.7, "filter: copies the filters never write")
            filtered = _live_filter(probes, books)
            harness.live_step(progress, 0.85, "late_subscriber: lab_late joins late")
            pause_lab_subscriptions()
            late = _live_late(probes)
    finally:
        pause_lab_subscriptions()
    return Measurement(fan_out, rounds, drained, filtered, late)


def _share(done: int, published: int) -> str:
    """Return "processed/pending": pending counts a message not copied yet too."""
    return f"{done}/{published - done}"


def tables(params: PublishSubscribeParams, measured: Measurement) -> Tables:
    """The model's four tables, counted on the real copies."""
    filters: list[list[Cell]] = [
        [
            found.type,
            found.published,
            found.subscriptions,
            found.copies,
            found.published * found.subscriptions - found.copies,
            " ".join(found.copied_to),
        ]
        for found in measured.filtered
    ]
    published = sum(found.published for found in measured.filtered)
    active = measured.filtered[0].subscriptions if measured.filtered else 0
    copies = sum(found.copies for found in measured.filtered)
    filters.append(["all", published, active, copies, published * active - copies, ""])
    last = measured.late[-1]
    late_seen = last.lab_late_seen or 0
    drained = measured.drained
    return {
        "live_fan_out": table(
            ["subscribers", "publish_calls", "copies", "delivered", "subscriptions"],
            [
                [
                    len(row.subscriptions),
                    row.published,
                    row.copies,
                    row.delivered,
                    " ".join(row.subscriptions),
                ]
                for row in measured.fan_out
            ],
        ),
        "live_slow_subscriber": table(
            [
                "round",
                "lab_probe",
                "lab_slow",
                "lab_probe_ms",
                "elapsed_ms",
                "unrelayed",
            ],
            [
                [
                    row.number,
                    _share(row.lab_probe_done, row.published),
                    _share(row.lab_slow_done, row.published),
                    row.lab_probe_ms,
                    row.elapsed_ms,
                    row.unrelayed,
                ]
                for row in measured.rounds
            ],
        ),
        "live_slow_drained": table(
            ["published", "lab_probe", "lab_slow", "drained_after_ms"],
            [
                [
                    drained.published,
                    drained.lab_probe_done,
                    drained.lab_slow_done,
                    drained.after_ms,
                ]
            ],
        ),
        "live_filter": table(
            [
                "type",
                "published",
                "subscriptions",
                "copies",
                "not_copied",
                "copied_to",
            ],
            filters,
        ),
        "live_late_subscriber": table(
            ["published", "missed_by_late"],
            [[last.published, last.published - late_seen]],
        ),
        "live_late_subscriber_steps": table(
            ["stage", "published", "lab_probe", "lab_late"],
            [
                [step.stage, step.published, step.lab_probe_done, step.lab_late_seen]
                for step in measured.late
            ],
        ),
    }


class _Probes:
    """Publish a run's probes with fresh sequence numbers and wait for their copies."""

    def __init__(self, run: str, system: LiveSystem) -> None:
        self.run = run
        self.system = system
        self.next_seq = 1

    def publish(self, count: int, **extra: int) -> list[int]:

        seqs = range(self.next_seq, self.next_seq + count)
        self.next_seq += count
        return helpers.publish_probe_bodies(self.run, seqs, **extra)

    def settle(self, ids: list[int], what: str, timeout: float = 30.0) -> float:

        return harness.wait_until(
            lambda: helpers.copies_settled(ids),
            what=what,
            timeout=timeout,
            system=self.system,
        )


def _copies(ids: list[int], subscription: str | None = None) -> tuple[int, int]:
    """Return (copies written, copies done) of these messages."""

    rows = Delivery.objects.filter(message_id__in=ids)
    if subscription is not None:
        rows = rows.filter(subscription=subscription)
    done = rows.filter(status=Delivery.Status.DONE).count()
    return rows.count(), done


def _live_fan_out(probes: _Probes) -> list[FanOut]:
    rows: list[FanOut] = []
    names = [PROBE_SUBSCRIPTION]
    for joining in (None, LAB_SLOW, LAB_LATE):
        if joining is not None:
            subscription_start(joining)
            names.append(joining)
        ids = probes.publish(FAN_OUT_EVENTS)
        probes.settle(ids, f"the fan-out to {len(names)} subscription(s)")
        copies, done = _copies(ids)
        rows.append(FanOut(list(names), len(ids), copies, done))
    return rows


def _unrelayed(ids: list[int]) -> int:

    return int(OutboxMessage.objects.filter(pk__in=ids, relayed_at=None).count())


def _all_done(ids: list[int], subscription: str) -> bool:
    return _copies(ids, subscription)[1] == len(ids)


def _live_slow(
    probes: _Probes, rounds: int, per_round: int, budget: int, slow_ms: int
) -> tuple[list[Round], Drained]:
    """Return (each round, the copies once lab_slow has drained).

    A round lasts ``budget`` units whatever happens in it, as in the model: the
    snapshot is taken at its end, done or not. ``lab_probe_ms`` is when every
    ``lab_probe`` copy published so far was done, counted from the round's start
    (None: not within the round).
    """

    probe = harness.PROBE_SUBSCRIPTION
    round_s = budget * LIVE_UNIT_MS / 1000
    published: list[int] = []
    rows: list[Round] = []
    first = time.monotonic()
    for round_no in range(1, rounds + 1):
        started = time.monotonic()
        published += probes.publish(per_round, slow_ms=slow_ms)
        fast_ms: int | None = None
        while True:
            now = time.monotonic()
            if fast_ms is None and _all_done(published, probe):
                fast_ms = round((now - started) * 1000)
            if now >= started + round_s:
                break
            probes.system.check_workers()
            time.sleep(min(harness.POLL_S, started + round_s - now))
        fast = _copies(published, probe)[1]
        slow = _copies(published, LAB_SLOW)[1]
        unrelayed = _unrelayed(published)
        elapsed_ms = round((time.monotonic() - first) * 1000)
        rows.append(
            Round(round_no, len(published), fast, slow, fast_ms, elapsed_ms, unrelayed)
        )
    last_round = time.monotonic()
    timeout = 30 + len(published) * slow_ms / 1000 * 2
    probes.settle(published, "lab_slow's backlog", timeout=timeout)
    drained_ms = round((time.monotonic() - last_round) * 1000)
    fast_done = _copies(published, probe)[1]
    slow_done = _copies(published, LAB_SLOW)[1]
    return rows, Drained(len(published), fast_done, slow_done, drained_ms)


def _live_filter(probes: _Probes, books: list[int]) -> list[Filtered]:

    subscription_start(LAB_LATE)
    with_states = subscription_states()
    active = [name for name in SUBSCRIPTIONS if with_states[name].active]
    by_type: dict[str, list[int]] = {
        LAB_PROBE: [],
        MessageType.STOCK_CORRECTED.value: [],
    }
    for n in range(LIVE_MIXED):
        if n % 2 == 0:
            by_type[LAB_PROBE] += probes.publish(1)
        else:
            book = books[n // 2 % len(books)]
            by_type[MessageType.STOCK_CORRECTED.value] += helpers.stock_recount(
                [book], 1
            )
    every = [pk for ids in by_type.values() for pk in ids]
    probes.settle(every, "the filter run's copies")
    rows: list[Filtered] = []
    for kind, ids in by_type.items():
        copies = Delivery.objects.filter(message_id__in=ids)
        names = sorted(set(copies.values_list("subscription", flat=True)))
        rows.append(Filtered(kind, len(ids), len(active), copies.count(), names))
    return rows


def _live_late(probes: _Probes) -> list[LateStep]:
    before = probes.publish(LATE_BEFORE_JOINING)
    probes.settle(before, "the probes before lab_late starts")
    steps = [
        LateStep(
            "before lab_late starts",
            len(before),
            _copies(before, PROBE_SUBSCRIPTION)[1],
            None,
        )
    ]
    subscription_start(LAB_LATE)
    after = probes.publish(LATE_AFTER_JOINING)
    probes.settle(after, "the probes after lab_late starts")
    every = before + after
    late_seen = ProbeEffect.objects.filter(
        mode=LAB_LATE, run=probes.run, message_id__in=every
    ).count()
    steps.append(
        LateStep(
            "after lab_late starts",
            len(every),
            _copies(every, PROBE_SUBSCRIPTION)[1],
            late_seen,
        )
    )
    return steps


LIVE = LivePart(check=live_check, measure=measure, tables=tables)
