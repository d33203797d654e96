"""Independent reference for the scheduled-tasks lab: JavaScript's Date arithmetic on
integer milliseconds (the lesson's code, line by line), and clamp/skip by scanning
calendar days one at a time. Shares no code with ``jobs.recurrence``."""

from __future__ import annotations

MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS

# name -> (type, day, hour, minute, interval minutes); monthly ones at 02:30.
DEFINITIONS = {
    "overdue_notification": ("daily", 0, 6, 0, 0),
    "inventory_summary": ("interval", 0, 0, 0, 15),
    "monthly_report": ("overflow", 1, 2, 30, 0),
    "end_of_month": ("overflow", 31, 2, 30, 0),
    "end_of_month_clamp": ("clamp", 31, 2, 30, 0),
    "end_of_month_skip": ("skip", 31, 2, 30, 0),
}


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (month 1..12)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    doe = days - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def date_utc(year: int, month0: int, day: int, hour: int, minute: int) -> int:
    """JavaScript's Date.UTC: a zero-based month and a day that may overflow."""
    year += month0 // 12
    month0 %= 12
    first = days_from_civil(year, month0 + 1, 1)
    return (first + day - 1) * DAY_MS + hour * 60 * MINUTE_MS + minute * MINUTE_MS


def month_length(year: int, month: int) -> int:
    following = (year + 1, 1) if month == 12 else (year, month + 1)
    return days_from_civil(*following, 1) - days_from_civil(year, month, 1)


def next_run(name: str, now: int) -> int:
    kind, day, hour, minute, every = DEFINITIONS[name]
    if kind == "interval":
        step = every * MINUTE_MS
        return now // step * step + step
    year, month, dom = civil_from_days(now // DAY_MS)
    if kind == "daily":
        today = date_utc(year, month - 1, dom, hour, minute)
        return today if today > now else today + DAY_MS
    if kind == "overflow":
        this_month = date_utc(year, month - 1, day, hour, minute)
        if this_month > now:
            return this_month
        return date_utc(year, month, day, hour, minute)
    # clamp / skip: walk forward one calendar day at a time
    today = now // DAY_MS
    for offset in range(0, 800):
        y, m, d = civil_from_days(today + offset)
        wanted = min(day, month_length(y, m)) if kind == "clamp" else day
        if d != wanted:
            continue
        candidate = (
            (today + offset) * DAY_MS + hour * 60 * MINUTE_MS + minute * MINUTE_MS
        )
        if candidate > now:
            return candidate
    raise AssertionError("no run found")


def stamp(ms: int) -> str:
    y, m, d = civil_from_days(ms // DAY_MS)
    minutes = ms % DAY_MS // MINUTE_MS
    return f"{y:04d}-{m:02d}-{d:02d} {minutes // 60:02d}:{minutes % 60:02d}"


def next_runs_rows(start_ms: int, runs: int) -> list[list[str]]:
    rows = []
    for name in DEFINITIONS:
        at = start_ms
        row = [name]
        for _ in range(runs):
            at = next_run(name, at)
            row.append(stamp(at))
        rows.append(row)
    return rows


def overlap_rows() -> list[list[object]]:
    """Two reports started at once: both run unlocked; one runs, one skips locked."""
    return [["unlocked", 2, 0, 2], ["locked", 1, 1, 1]]
