"""The lab's model part: the lesson's experiment, self-contained."""

from __future__ import annotations

from typing import Final

from course.labs.broadcast_and_channel_management.params import (
    BroadcastParams,
)
from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)

COLUMNS: Final = ["mode", "subscriber_saw", "broadcasts", "copies"]
MODES: Final = ("memory", "redis")
WAIT_S: Final = 1.5


def relay_counts(instances: int, *, relay: bool) -> tuple[int, int, int]:
    """Return (subscriber saw, relay broadcasts, relay copies) of the lesson."""
    if not relay:
        return 0, 0, 0
    return 1, 1, instances


def model(params: BroadcastParams, progress: Progress) -> Tables:
    instances = params.instances
    rows: list[list[Cell]] = []
    for label, relay in (("no relay", False), ("with relay", True)):
        rows.append([label, *relay_counts(instances, relay=relay)])
    return {"delivery": table(COLUMNS, rows)}
