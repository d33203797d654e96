"""Recurrence rules of periodic tasks, and the pure rules that place their runs in time.

Everything here is pure: "now" is always an argument, every instant is an aware UTC
datetime, and nothing reads a clock, settings or Redis. The scheduler process
(``jobs.management.commands.scheduler``), the admin and the ``scheduled-tasks`` lab
all call the same ``next_run``, so the page, the lab and production share one policy.

Three recurrences:

- ``Daily(hour, minute)``: once a day at that UTC time;
- ``Every(seconds)``: fixed rate on a grid counted from the Unix epoch (every 15
  minutes runs at :00, :15, :30, :45 whatever time the scheduler started);
- ``Monthly(day, hour, minute, month_end)``: a day of the month, where ``month_end``
  says what happens in a month that lacks the day (the 31st in April):
  ``overflow`` lets the surplus days run on into the next month, as JavaScript's
  ``Date.UTC`` does (Feb 31 2026 is Mar 3); ``clamp`` runs on the month's last day;
  ``skip`` does not run that month.
"""

from __future__ import annotations

import calendar
import datetime
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
_DAY = datetime.timedelta(days=1)


class MonthEnd(StrEnum):
    OVERFLOW = "overflow"
    CLAMP = "clamp"
    SKIP = "skip"


class CatchUp(StrEnum):
    # Make up the missed slots, at most the newest ``catch_up_limit`` of them.
    CATCH_UP = "catch_up"
    # Run once for the newest missed slot; the others are only counted as missed.
    NO_CATCH_UP = "no_catch_up"


@dataclass(frozen=True)
class Daily:
    hour: int
    minute: int = 0

    def __post_init__(self) -> None:
        _check_time(self.hour, self.minute)

    def describe(self) -> str:
        return f"daily at {self.hour:02d}:{self.minute:02d} UTC"


@dataclass(frozen=True)
class Every:
    seconds: int

    def __post_init__(self) -> None:
        if self.seconds < 1:
            raise ValueError(f"an interval is at least 1 second, got {self.seconds}")

    @classmethod
    def minutes(cls, minutes: int) -> Every:
        return cls(seconds=minutes * 60)

    def describe(self) -> str:
        if self.seconds % 3600 == 0:
            return f"every {self.seconds // 3600} h"
        if self.seconds % 60 == 0:
            return f"every {self.seconds // 60} min"
        return f"every {self.seconds} s"


@dataclass(frozen=True)
class Monthly:
    day: int
    hour: int
    minute: int = 0
    month_end: MonthEnd = MonthEnd.CLAMP

    def __post_init__(self) -> None:
        if not 1 <= self.day <= 31:
            raise ValueError(f"a day of the month is 1..31, got {self.day}")
        _check_time(self.hour, self.minute)

    def describe(self) -> str:
        return (
            f"monthly on day {self.day} at {self.hour:02d}:{self.minute:02d} UTC "
            f"({self.month_end} at month end)"
        )


Recurrence = Daily | Every | Monthly


def _check_time(hour: int, minute: int) -> None:
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        raise ValueError(f"not a time of day: {hour:02d}:{minute:02d}")


def _utc(now: datetime.datetime) -> datetime.datetime:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    return now.astimezone(UTC)


def _at(day: datetime.date, hour: int, minute: int) -> datetime.datetime:
    return datetime.datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _month(year: int, month: int, offset: int) -> tuple[int, int]:
    """Return (year, month) ``offset`` months after the given one (month is 1..12)."""
    index = year * 12 + (month - 1) + offset
    return index // 12, index % 12 + 1


def _monthly_candidate(
    definition: Monthly, year: int, month: int
) -> datetime.datetime | None:
    """Return the month's run instant under its month-end policy (None: no run)."""
    length = calendar.monthrange(year, month)[1]
    if definition.day <= length:
        day = datetime.date(year, month, definition.day)
    elif definition.month_end is MonthEnd.CLAMP:
        day = datetime.date(year, month, length)
    elif definition.month_end is MonthEnd.SKIP:
        return None
    else:  # OVERFLOW: the surplus days are counted on from the 1st
        day = datetime.date(year, month, 1) + (definition.day - 1) * _DAY
    return _at(day, definition.hour, definition.minute)


def next_run(definition: Recurrence, now: datetime.datetime) -> datetime.datetime:
    """Return the first run instant strictly after ``now`` (aware, UTC)."""
    now = _utc(now)
    if isinstance(definition, Every):
        # Integer microseconds: a float division would misplace late grid points.
        step = definition.seconds * 1_000_000
        elapsed = (now - _EPOCH) // datetime.timedelta(microseconds=1)
        return _EPOCH + datetime.timedelta(microseconds=(elapsed // step + 1) * step)
    if isinstance(definition, Daily):
        today = _at(now.date(), definition.hour, definition.minute)
        return today if today > now else today + _DAY
    if definition.month_end is MonthEnd.OVERFLOW:
        # As the course's JavaScript: this month's instant if still ahead, otherwise
        # next month's; either may have run on into the month after it.
        this_month = _monthly_candidate(definition, now.year, now.month)
        if this_month is not None and this_month > now:
            return this_month
        year, month = _month(now.year, now.month, 1)
        following = _monthly_candidate(definition, year, month)
        assert following is not None  # overflow always yields an instant
        return following
    # Clamp finds a run within two months; skip within three (day 31 after January
    # 31 skips February); twelve is a safe bound for any day.
    for offset in range(13):
        year, month = _month(now.year, now.month, offset)
        candidate = _monthly_candidate(definition, year, month)
        if candidate is not None and candidate > now:
            return candidate
    raise AssertionError(f"no run within a year for {definition}")  # unreachable


def next_runs(
    definition: Recurrence, now: datetime.datetime, count: int
) -> list[datetime.datetime]:
    """Return the next ``count`` run instants, each computed from the one before."""
    found: list[datetime.datetime] = []
    at = now
    for _ in range(count):
        at = next_run(definition, at)
        found.append(at)
    return found


# Far enough back to hold at least one run of any recurrence: the longest gap is
# a day-31 monthly under "skip" (January 31 to March 31).
_LOOKBACK = datetime.timedelta(days=100)


def current_slot(definition: Recurrence, now: datetime.datetime) -> datetime.datetime:
    """Return the newest run instant at or before ``now``: the slot now belongs to.

    A run started by hand gets this slot, so a task whose effect belongs to a slot
    (one reminder per loan per day) repeats the slot's effect instead of inventing
    one for an instant the schedule never names.
    """
    now = _utc(now)
    if isinstance(definition, Every):
        upcoming = next_run(definition, now)
        return upcoming - datetime.timedelta(seconds=definition.seconds)
    slot = next_run(definition, now - _LOOKBACK)
    while (following := next_run(definition, slot)) <= now:
        slot = following
    return slot


@dataclass(frozen=True)
class RunPlan:
    """What the scheduler does for one task at one pass."""

    run_slots: tuple[datetime.datetime, ...]  # the slots to run now, oldest first
    missed: int  # due slots that will never run
    next_run_at: datetime.datetime  # the first slot after now


def plan_runs(
    definition: Recurrence,
    next_run_at: datetime.datetime,
    now: datetime.datetime,
    *,
    catch_up: CatchUp,
    catch_up_limit: int = 1,
) -> RunPlan:
    """Return the slots due by ``now`` that should run, and how many are missed.

    ``next_run_at`` is the first slot not yet handled. Normally one slot is due per
    pass; more are due after the scheduler was down. Catch-up runs the newest
    ``catch_up_limit`` of them (a long outage must not fire a month of runs at
    once); no-catch-up runs only the newest. Every other due slot counts as missed.
    """
    if catch_up_limit < 1:
        raise ValueError("catch_up_limit is at least 1")
    now = _utc(now)
    first = _utc(next_run_at)
    if first > now:
        return RunPlan((), 0, first)
    keep = catch_up_limit if catch_up is CatchUp.CATCH_UP else 1
    if isinstance(definition, Every):
        # The grid is arithmetic: count the slots instead of walking a long outage
        # (a 2-second task down for a week has 300,000 of them).
        step = datetime.timedelta(seconds=definition.seconds)
        due = (now - first) // step + 1
        newest = first + (due - 1) * step
        slots = tuple(newest - i * step for i in reversed(range(min(keep, due))))
        return RunPlan(slots, due - len(slots), next_run(definition, now))
    recent: deque[datetime.datetime] = deque(maxlen=keep)
    due = 0
    slot = first
    while slot <= now:
        recent.append(slot)
        due += 1
        slot = next_run(definition, slot)
    return RunPlan(tuple(recent), due - len(recent), slot)
