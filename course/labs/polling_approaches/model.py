"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

from typing import Final

from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.polling_approaches.params import PollingApproachesParams

ADVANCE_AFTER_MS: Final = 300  # the script's sleep 0.3 before /advance
SHORT_POLLS_BEFORE: Final = 5
WINDOW_S: Final = 60
EVENTS: Final = 1
COST_ROWS: Final = (
    ("Short polling, 1 s interval", "short", 1, "1 s"),
    ("Short polling, 5 s interval", "short", 5, "5 s"),
    ("Long polling, 30 s hold", "long", 30, "network latency"),
)


def short_polling() -> tuple[int, int]:
    """Return (requests, empty) of the script's short-polling half."""
    requests = SHORT_POLLS_BEFORE + 1
    return requests, SHORT_POLLS_BEFORE


def long_polling(hold_ms: int) -> tuple[int, int]:
    """Return (requests, empty) of the script's long-polling half."""
    # The first wait gets the advance only if its hold outlasts the 300 ms.
    first_empty = 1 if hold_ms <= ADVANCE_AFTER_MS else 0
    # The second wait asks at version 1: nothing newer comes, its hold runs out.
    return 2, first_empty + 1


def cost(kind: str, every_s: int) -> tuple[int, int]:
    """Return (requests, empty) in the window for one event (the lesson's sums)."""
    if kind == "short":
        requests = WINDOW_S // every_s
        return requests, requests - EVENTS
    holds = WINDOW_S // every_s
    return holds + EVENTS, holds - EVENTS


def model(params: PollingApproachesParams, progress: Progress) -> Tables:
    hold_ms = params.hold_ms
    progress(0.2, "short and long polling of one event")
    short = short_polling()
    long = long_polling(hold_ms)
    rows: list[list[Cell]] = [
        ["short polling", short[0], short[1]],
        ["long polling", long[0], long[1]],
    ]
    progress(0.6, "cost over a sixty-second window")
    cost_rows: list[list[Cell]] = []
    for label, kind, every, latency in COST_ROWS:
        requests, empty = cost(kind, every)
        cost_rows.append([label, WINDOW_S, requests, empty, latency])
    return {
        "requests": table(["approach", "requests", "empty_responses"], rows),
        "cost": table(
            ["approach", "window_s", "requests", "empty_responses", "worst_latency"],
            cost_rows,
        ),
    }
