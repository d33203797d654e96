"""The schedule's pure rules: next_run under every recurrence, and the run plan."""

import calendar
import datetime
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.recurrence import (
    CatchUp,
    Daily,
    Every,
    MonthEnd,
    Monthly,
    next_run,
    next_runs,
    plan_runs,
)
from jobs.scheduler import periodic_tasks

UTC = datetime.UTC
START = datetime.datetime(2026, 1, 31, 23, 47, tzinfo=UTC)


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0
) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, tzinfo=UTC)


def text(instants: list[datetime.datetime]) -> list[str]:
    return [i.strftime("%Y-%m-%d %H:%M") for i in instants]


def monthly(day: int, policy: MonthEnd) -> Monthly:
    return Monthly(day=day, hour=2, minute=30, month_end=policy)


# --- next_run: fixed cases -----------------------------------------------------------


def test_the_lessons_four_definitions():
    assert next_runs(Daily(6), START, 3) == [at(2026, 2, d, 6) for d in (1, 2, 3)]
    assert next_runs(Every.minutes(15), START, 3) == [
        at(2026, 2, 1, 0, m) for m in (0, 15, 30)
    ]
    assert next_runs(monthly(1, MonthEnd.OVERFLOW), START, 3) == [
        at(2026, m, 1, 2, 30) for m in (2, 3, 4)
    ]
    # Feb 31 runs on to Mar 3; Apr 31 to May 1.
    assert next_runs(monthly(31, MonthEnd.OVERFLOW), START, 3) == [
        at(2026, 3, 3, 2, 30),
        at(2026, 3, 31, 2, 30),
        at(2026, 5, 1, 2, 30),
    ]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (MonthEnd.OVERFLOW, [(3, 3), (3, 31), (5, 1)]),
        (MonthEnd.CLAMP, [(2, 28), (3, 31), (4, 30)]),
        (MonthEnd.SKIP, [(3, 31), (5, 31), (7, 31)]),
    ],
)
def test_day_31_across_month_ends(policy, expected):
    assert next_runs(monthly(31, policy), START, 3) == [
        at(2026, month, day, 2, 30) for month, day in expected
    ]


@pytest.mark.parametrize(
    ("day", "policy", "expected"),
    [
        # 2028 is a leap year: February has a 29th, not a 30th.
        (29, MonthEnd.CLAMP, "2028-02-29 02:30"),
        (29, MonthEnd.SKIP, "2028-02-29 02:30"),
        (29, MonthEnd.OVERFLOW, "2028-02-29 02:30"),
        (30, MonthEnd.CLAMP, "2028-02-29 02:30"),
        (30, MonthEnd.SKIP, "2028-03-30 02:30"),
        (30, MonthEnd.OVERFLOW, "2028-03-01 02:30"),
        (31, MonthEnd.OVERFLOW, "2028-03-02 02:30"),
    ],
)
def test_leap_february(day, policy, expected):
    assert text([next_run(monthly(day, policy), at(2028, 2, 1))]) == [expected]


@pytest.mark.parametrize(
    ("now", "policy", "expected"),
    [
        # 2027 is not a leap year: the 29th does not exist in February.
        (at(2027, 2, 1), MonthEnd.CLAMP, "2027-02-28 02:30"),
        (at(2027, 2, 1), MonthEnd.SKIP, "2027-03-29 02:30"),
        (at(2027, 2, 1), MonthEnd.OVERFLOW, "2027-03-01 02:30"),
        # 2100 is not a leap year either (divisible by 100, not by 400); 2000 was.
        (at(2100, 2, 1), MonthEnd.CLAMP, "2100-02-28 02:30"),
        (at(2000, 2, 1), MonthEnd.SKIP, "2000-02-29 02:30"),
    ],
)
def test_day_29_outside_leap_years(now, policy, expected):
    assert text([next_run(monthly(29, policy), now)]) == [expected]


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        (Daily(6), "2027-01-01 06:00"),
        (Every.minutes(15), "2027-01-01 00:00"),
        (monthly(1, MonthEnd.CLAMP), "2027-01-01 02:30"),
        (monthly(31, MonthEnd.SKIP), "2027-01-31 02:30"),
        (monthly(31, MonthEnd.CLAMP), "2027-01-31 02:30"),
        (monthly(31, MonthEnd.OVERFLOW), "2027-01-31 02:30"),
    ],
)
def test_year_end(definition, expected):
    assert text([next_run(definition, at(2026, 12, 31, 23, 59))]) == [expected]


def test_december_31_overflow_from_november_lands_in_december():
    # Nov 31 overflows into Dec 1; the run after Dec 31 is in January.
    assert text(next_runs(monthly(31, MonthEnd.OVERFLOW), at(2026, 11, 1), 3)) == [
        "2026-12-01 02:30",
        "2026-12-31 02:30",
        "2027-01-31 02:30",
    ]


def test_an_instant_exactly_on_a_slot_gives_the_following_slot():
    assert next_run(Daily(6), at(2026, 2, 1, 6)) == at(2026, 2, 2, 6)
    assert next_run(Every.minutes(15), at(2026, 2, 1, 0, 15)) == at(2026, 2, 1, 0, 30)
    assert next_run(monthly(1, MonthEnd.CLAMP), at(2026, 2, 1, 2, 30)) == at(
        2026, 3, 1, 2, 30
    )


def test_other_offsets_are_read_as_the_same_instant_and_answered_in_utc():
    istanbul = datetime.timezone(datetime.timedelta(hours=3))
    now = datetime.datetime(2026, 2, 1, 8, 59, tzinfo=istanbul)  # 05:59 UTC
    found = next_run(Daily(6), now)
    assert found == at(2026, 2, 1, 6)
    assert found.utcoffset() == datetime.timedelta(0)


def test_naive_now_and_bad_definitions_are_refused():
    with pytest.raises(ValueError, match="aware"):
        next_run(Daily(6), datetime.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="day of the month"):
        Monthly(day=32, hour=2)
    with pytest.raises(ValueError, match="time of day"):
        Daily(hour=24)
    with pytest.raises(ValueError, match="at least 1 second"):
        Every(seconds=0)


# --- next_run: properties ------------------------------------------------------------

instants = st.datetimes(
    min_value=datetime.datetime(1999, 1, 1),
    max_value=datetime.datetime(2101, 12, 31),
    timezones=st.just(UTC),
)
policies = st.sampled_from(list(MonthEnd))
monthlies = st.builds(
    Monthly,
    day=st.integers(1, 31),
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
    month_end=policies,
)
definitions = st.one_of(
    st.builds(Daily, hour=st.integers(0, 23), minute=st.integers(0, 59)),
    st.builds(Every, seconds=st.integers(1, 7 * 86400)),
    monthlies,
)


def month_length(instant: datetime.datetime) -> int:
    return calendar.monthrange(instant.year, instant.month)[1]


@settings(max_examples=300, deadline=None)
@given(definitions, instants)
def test_next_run_is_strictly_after_now_and_fits_its_definition(definition, now):
    found = next_run(definition, now)
    assert found > now
    assert found.tzinfo is UTC
    if isinstance(definition, Every):
        assert found - now <= datetime.timedelta(seconds=definition.seconds)
        assert found.timestamp() % definition.seconds == 0
        return
    assert (found.hour, found.minute, found.second, found.microsecond) == (
        definition.hour,
        definition.minute,
        0,
        0,
    )
    if isinstance(definition, Daily):
        assert found - now <= datetime.timedelta(days=1)
    elif definition.month_end is MonthEnd.CLAMP:
        assert found.day == min(definition.day, month_length(found))
    elif definition.month_end is MonthEnd.SKIP:
        assert found.day == definition.day


@settings(max_examples=200, deadline=None)
@given(definitions, instants, st.floats(0, 1))
def test_any_instant_before_the_next_run_has_the_same_next_run(definition, now, part):
    # Not for overflow: the course's rule jumps there (Feb 28 -> Mar 3, Mar 1 -> 31).
    if isinstance(definition, Monthly) and definition.month_end is MonthEnd.OVERFLOW:
        return
    found = next_run(definition, now)
    between = now + (found - now) * part
    if between < found:
        assert next_run(definition, between) == found


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 31), instants)
def test_clamp_runs_every_month_and_skip_only_where_the_day_exists(day, now):
    clamp = next_runs(monthly(day, MonthEnd.CLAMP), now, 14)
    months = [(i.year, i.month) for i in clamp]
    assert len(set(months)) == 14  # one run per month, none twice
    for before, after in itertools.pairwise(clamp):
        gap = (after.year * 12 + after.month) - (before.year * 12 + before.month)
        assert gap == 1
    for found in next_runs(monthly(day, MonthEnd.SKIP), now, 14):
        assert found.day == day
    # Every skipped month is a month too short for the day.
    skip = next_runs(monthly(day, MonthEnd.SKIP), now, 6)
    for before, after in itertools.pairwise(skip):
        year, month = before.year, before.month
        while True:
            month += 1
            if month == 13:
                year, month = year + 1, 1
            if (year, month) == (after.year, after.month):
                break
            assert calendar.monthrange(year, month)[1] < day


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 31), instants)
def test_overflow_runs_on_the_day_or_the_surplus_days_into_the_next_month(day, now):
    found = next_run(monthly(day, MonthEnd.OVERFLOW), now)
    if found.day != day:
        # Overflowed: (day - length of the previous month) days into this month.
        previous = found.replace(day=1) - datetime.timedelta(days=1)
        assert found.day == day - month_length(previous)


# --- the run plan: catch-up and no-catch-up ------------------------------------------

MONTHLY_REPORT = Monthly(day=1, hour=2, minute=0, month_end=MonthEnd.CLAMP)


def test_nothing_is_due_before_the_stored_slot():
    plan = plan_runs(Daily(6), at(2026, 2, 1, 6), START, catch_up=CatchUp.CATCH_UP)
    assert plan.run_slots == ()
    assert plan.missed == 0
    assert plan.next_run_at == at(2026, 2, 1, 6)


def test_one_due_slot_runs_under_either_policy():
    for policy in CatchUp:
        plan = plan_runs(Daily(6), at(2026, 1, 31, 6), START, catch_up=policy)
        assert plan.run_slots == (at(2026, 1, 31, 6),)
        assert plan.missed == 0
        assert plan.next_run_at == at(2026, 2, 1, 6)


def test_catch_up_is_bounded_to_the_newest_n_slots():
    # Down since June 2025: eight monthly slots fell due by the start instant.
    plan = plan_runs(
        MONTHLY_REPORT,
        at(2025, 6, 1, 2),
        START,
        catch_up=CatchUp.CATCH_UP,
        catch_up_limit=3,
    )
    assert plan.run_slots == (at(2025, 11, 1, 2), at(2025, 12, 1, 2), at(2026, 1, 1, 2))
    assert plan.missed == 5
    assert plan.next_run_at == at(2026, 2, 1, 2)


def test_no_catch_up_runs_once_and_counts_the_rest_as_missed():
    plan = plan_runs(
        Every.minutes(15), at(2026, 1, 31, 20), START, catch_up=CatchUp.NO_CATCH_UP
    )
    # 20:00 .. 23:45 is sixteen slots; only 23:45 runs.
    assert plan.run_slots == (at(2026, 1, 31, 23, 45),)
    assert plan.missed == 15
    assert plan.next_run_at == at(2026, 2, 1)


def test_a_long_outage_of_a_fast_task_is_counted_not_walked():
    week_ago = START - datetime.timedelta(days=7)
    plan = plan_runs(Every(seconds=2), week_ago, START, catch_up=CatchUp.NO_CATCH_UP)
    assert plan.missed == 7 * 86400 // 2  # 302,401 due, one runs
    assert plan.run_slots == (START,)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 3600),
    instants,
    st.integers(0, 400),
    st.sampled_from(list(CatchUp)),
    st.integers(1, 5),
)
def test_interval_shortcut_equals_walking_the_slots(seconds, now, behind, policy, n):
    rule = Every(seconds=seconds)
    first = next_run(rule, now - datetime.timedelta(seconds=seconds * behind))
    plan = plan_runs(rule, first, now, catch_up=policy, catch_up_limit=n)
    walked = []
    slot = first
    while slot <= now:
        walked.append(slot)
        slot = next_run(rule, slot)
    keep = n if policy is CatchUp.CATCH_UP else 1
    assert list(plan.run_slots) == walked[-keep:]
    assert plan.missed == max(0, len(walked) - keep)
    assert plan.next_run_at == slot


def test_the_periodic_tasks_of_the_issue():
    by_name = {task.name: task for task in periodic_tasks()}
    assert by_name["overdue_notifications"].recurrence == Daily(hour=6, minute=0)
    assert by_name["inventory_summary"].recurrence == Every(seconds=900)
    report = by_name["monthly_loan_report"]
    assert report.recurrence == Monthly(1, 2, 0, MonthEnd.CLAMP)
    assert (report.catch_up, report.catch_up_limit) == (CatchUp.CATCH_UP, 3)
    assert report.func == "library.report.start.monthly_report_start_for_slot"
    assert by_name["messaging_sweep"].inline
    assert by_name["messaging_sweep"].recurrence == Every(seconds=2)
    assert by_name["messaging_trim"].queue == "messaging"
