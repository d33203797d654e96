"""The lab service's rules, as pure functions: whose run goes next, what a run costs,
whether a request stays within its quotas, and how long a waiting run may wait.

No I/O and no settings: ``course.services.labqueue`` gathers the facts (waiting runs,
usage, limits) and calls these; the tests call them with facts of their own.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from course.labs.harness.base import Lab, Params

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


# --- Whose run goes next: round robin across owners ------------------------------


@dataclass(frozen=True)
class Waiting:
    """A run waiting for a slot: its id, who it belongs to, and when it was asked."""

    job_id: uuid.UUID
    owner: str
    created_at: datetime.datetime


def fair_order(
    waiting: Sequence[Waiting], last_served: Mapping[str, datetime.datetime]
) -> list[Waiting]:
    """Return the waiting runs in the order the workers will take them.

    Round robin across owners, not first come first served: the first round takes
    each owner's oldest run, the second each owner's next one, and so on, so one
    learner's five runs never stand in front of everyone else's first. Within a
    round, owners go in the order they were last served (never served first, then
    the one served longest ago), ties broken by their oldest waiting run.
    """
    queues: dict[str, list[Waiting]] = {}
    for run in sorted(waiting, key=lambda w: (w.created_at, str(w.job_id))):
        queues.setdefault(run.owner, []).append(run)
    owners = sorted(
        queues,
        key=lambda owner: (
            last_served.get(owner, _EPOCH),
            queues[owner][0].created_at,
            owner,
        ),
    )
    rounds = max((len(runs) for runs in queues.values()), default=0)
    return [
        queues[owner][turn]
        for turn in range(rounds)
        for owner in owners
        if turn < len(queues[owner])
    ]


def fair_owner(*, visitor: str, client: str) -> str:
    """Return whose turn a run takes: the learner, or an anonymous run's address.

    Anonymous visitors take turns by client address, so a hundred fresh sessions
    from one address are one owner in the round robin, not a hundred.
    """
    if visitor.startswith("user:") or not client:
        return visitor
    return f"addr:{client}"


# --- What a run costs ------------------------------------------------------------


def run_cost(lab: Lab[Any], params: Params) -> float:
    """Return the run's estimated work as a multiple of the lab's default run.

    Each parameter marked as driving the work (``Param.work``) scales it: by its
    value (requests, messages) or by how many values its list holds (capacities,
    consumer counts, each a replay of the experiment). The product of the ratios
    to the defaults is the estimate: ``cache-metrics`` with 100 times the requests
    and twice the capacities costs about 200 default runs. A smaller run costs less
    than one, never less than a twentieth.
    """
    cost = 1.0
    for param in lab.params:
        if param.work is None or param.name not in params:
            continue
        cost *= _ratio(param.work, params[param.name], param.default)
    return round(max(cost, 0.05), 2)


def _ratio(work: str, value: object, default: object) -> float:
    if work == "count":
        have = len(value) if isinstance(value, list) else 1
        base = len(default) if isinstance(default, list) else 1
        return max(have, 1) / max(base, 1)
    have_n = float(value) if isinstance(value, int | float) else 1.0
    base_n = float(default) if isinstance(default, int | float) else 1.0
    return max(have_n, 1.0) / max(base_n, 1.0)


def run_fingerprint(slug: str, params: Params, *, live: bool) -> str:
    """Return a digest naming the experiment: identical runs share it."""
    text = json.dumps(
        {"lab": slug, "params": params, "live": live}, sort_keys=True, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()


# --- Quotas ----------------------------------------------------------------------


class RefusalKind(StrEnum):
    """Why a run was refused; each maps to one HTTP answer."""

    NEEDS_ACCOUNT = "needs account"  # 403: sign up, then run it
    WITHDRAWN = "withdrawn"  # 403: an operator withdrew the live right
    TOO_HEAVY = "too heavy"  # 400: lower the parameters
    MODEL_ONLY = "model only"  # 400: the live part cannot run these values
    BUSY = "busy"  # 429 + Retry-After: runs in flight
    HOURLY = "hourly"  # 429 + Retry-After: the hour's budget is spent
    QUEUE_FULL = "queue full"  # 503 + Retry-After: the whole service is full


@dataclass(frozen=True)
class Refusal:
    kind: RefusalKind
    message: str
    retry_after_s: int | None = None


@dataclass(frozen=True)
class Limits:
    """What one requester may do; ``None`` in ``address_in_flight``: no such cap."""

    signed_in: bool
    live_allowed: bool
    in_flight: int
    address_in_flight: int | None
    live_per_hour: int
    cost_per_run: float
    cost_per_hour: float
    anonymous_cost_per_run: float


@dataclass(frozen=True)
class Spent:
    """One run counted against a requester's hour: when, what it cost, if live."""

    at: datetime.datetime
    cost: float
    live: bool


@dataclass(frozen=True)
class Usage:
    in_flight: int
    address_in_flight: int
    last_hour: tuple[Spent, ...]


def quota_check(
    *,
    limits: Limits,
    usage: Usage,
    cost: float,
    live: bool,
    now: datetime.datetime,
    typical_run_s: float,
) -> Refusal | None:
    """Return why the run may not start now, or None when it may.

    The checks go from what no waiting cures (an account, a right, a size) to what
    waiting does (runs in flight, the hour's budget), so the message names the
    thing the requester can act on.
    """
    if live and not limits.signed_in:
        return Refusal(
            RefusalKind.NEEDS_ACCOUNT,
            "Measuring the live system needs an account: sign up (it is free) or "
            "sign in, then run again. The model runs without one.",
        )
    if live and not limits.live_allowed:
        return Refusal(
            RefusalKind.WITHDRAWN,
            "An operator has withdrawn this account's right to run live parts; "
            "the model still runs.",
        )
    if cost > limits.cost_per_run:
        return _too_heavy(limits, cost)
    wait = max(1, math.ceil(typical_run_s))
    if usage.in_flight >= limits.in_flight:
        return Refusal(
            RefusalKind.BUSY,
            f"You already have {_runs(usage.in_flight)} waiting or running; let one "
            f"finish, then run again (in about {wait} s).",
            wait,
        )
    if (
        limits.address_in_flight is not None
        and usage.address_in_flight >= limits.address_in_flight
    ):
        return Refusal(
            RefusalKind.BUSY,
            f"{_runs(usage.address_in_flight)} from your network "
            f"{'is' if usage.address_in_flight == 1 else 'are'} waiting or running; "
            f"try again in about {wait} s, or sign in to run as yourself.",
            wait,
        )
    return _hourly(limits, usage, cost=cost, live=live, now=now)


def _too_heavy(limits: Limits, cost: float) -> Refusal:
    shown = _cost_text(cost)
    if not limits.signed_in:
        return Refusal(
            RefusalKind.NEEDS_ACCOUNT,
            f"This run would cost about {shown} default runs; without an account "
            f"a run may cost {_cost_text(limits.anonymous_cost_per_run)}. Sign up "
            "(it is free) to run it, or lower the size parameters.",
        )
    return Refusal(
        RefusalKind.TOO_HEAVY,
        f"This run would cost about {shown} default runs; one run may cost at "
        f"most {_cost_text(limits.cost_per_run)}. Lower the size parameters "
        "(requests, messages, list lengths).",
    )


def _hourly(
    limits: Limits, usage: Usage, *, cost: float, live: bool, now: datetime.datetime
) -> Refusal | None:
    window = [spent for spent in usage.last_hour if spent.at > now - HOUR]
    if live:
        lives = [spent for spent in window if spent.live]
        if len(lives) >= limits.live_per_hour:
            frees_at = _frees_at(
                [(spent.at, 1.0) for spent in lives], 1.0, limits.live_per_hour
            )
            return _hourly_refusal(
                f"You have started {len(lives)} live runs in the last hour, the "
                f"most an hour allows",
                frees_at,
                now,
            )
    spent_cost = sum(spent.cost for spent in window)
    if spent_cost + cost > limits.cost_per_hour:
        frees_at = _frees_at(
            [(spent.at, spent.cost) for spent in window], cost, limits.cost_per_hour
        )
        return _hourly_refusal(
            f"Your runs of the last hour cost about {_cost_text(spent_cost)} default "
            f"runs and this one {_cost_text(cost)}; an hour allows "
            f"{_cost_text(limits.cost_per_hour)}",
            frees_at,
            now,
        )
    return None


def _frees_at(
    spent: Sequence[tuple[datetime.datetime, float]], need: float, limit: float
) -> datetime.datetime | None:
    """Return when enough of the window has aged out for ``need`` more to fit."""
    total = sum(amount for _, amount in spent)
    for at, amount in sorted(spent):
        if total + need <= limit:
            break
        total -= amount
        if total + need <= limit:
            return at + HOUR
    return None  # more than an hour's budget alone: waiting never fits it


def _hourly_refusal(
    reason: str, frees_at: datetime.datetime | None, now: datetime.datetime
) -> Refusal:
    if frees_at is None:
        return Refusal(RefusalKind.TOO_HEAVY, f"{reason}; lower the size parameters.")
    seconds = max(1, math.ceil((frees_at - now).total_seconds()))
    return Refusal(
        RefusalKind.HOURLY,
        f"{reason}; you can run it again in {_duration_text(seconds)}.",
        seconds,
    )


def _cost_text(cost: float) -> str:
    return f"{cost:,.0f}" if cost >= 10 else f"{cost:.3g}"


def _duration_text(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds} s"
    return f"{math.ceil(seconds / 60)} min"


# --- How long a waiting run may wait ---------------------------------------------


def wait_estimate(*, ahead: int, slots: int, typical_run_s: float | None) -> int | None:
    """Return about how many seconds until a run with ``ahead`` runs before it starts.

    With ``slots`` runs at once, the runs ahead go in ``ahead // slots`` waves of
    about a typical run each (the wave in hand is counted as a whole one, which
    errs long). None when no run has finished yet to say what typical is.
    """
    if typical_run_s is None or slots < 1:
        return None
    if ahead < slots:
        return 0
    return math.ceil((ahead // slots) * typical_run_s)
