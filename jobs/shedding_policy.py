"""The load-shedding policy: which class a request is in, and what each class may hold.

Pure data and functions, no I/O and no event loop: ``jobs.shedding`` (the ASGI
middleware) asks them, and a lesson or a test can read them on their own.

- ``route_class`` puts a path in a ``Priority`` class, or exempts it (``None``): long
  polls, event streams and static files hold connections, not workers;
- ``Limits`` are the bounds of one daphne process: running places, the places only
  the critical class may use, waiting places, and each class's queue budget (the base
  budget times ``BUDGET_FACTOR``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Final


class Priority(IntEnum):
    """Request classes; a lower value is served first and shed last."""

    CRITICAL = 0
    NORMAL = 1
    LOW = 2


# A class's queue budget is the base budget times this factor.
BUDGET_FACTOR: Final = {Priority.CRITICAL: 2.0, Priority.NORMAL: 1.0, Priority.LOW: 0.5}

# Path patterns, first match wins; unmatched paths are NORMAL. ``None``: exempt.
ROUTES: Final[tuple[tuple[re.Pattern[str], Priority | None], ...]] = tuple(
    (re.compile(pattern), priority)
    for pattern, priority in (
        # Held connections, not work: long polls, event streams, static files.
        (r"^/static/", None),
        (r"^/realtime/jobs/[^/]+/(wait|events)$", None),
        (r"^/realtime/branches/\d+/events$", None),
        (r"^/jobs/[^/]+/(wait|events)$", None),
        (r"^/_lab/wait$", None),
        # A member at the desk: loans and signing in outrank everything.
        (r"^/loans/\d+/return/$", Priority.CRITICAL),
        (r"^/loans/issue/$", Priority.CRITICAL),
        (r"^/accounts/log(in|out)/$", Priority.CRITICAL),
        # Work that can wait for a quieter moment: reports, lab runs, dashboards.
        (r"^/jobs/.*report", Priority.LOW),
        (r"^/(realtime/)?reports?/", Priority.LOW),
        (r"^/course/[^/]+/run$", Priority.LOW),
        # The explorable page's model answers: the lesson still reads without them.
        (r"^/course/[^/]+/model\.json$", Priority.LOW),
        (r"^/admin/rq/", Priority.LOW),
    )
)


def route_class(path: str) -> Priority | None:
    """Return the class of ``path``, or None when it is exempt from admission."""
    for pattern, priority in ROUTES:
        if pattern.search(path):
            return priority
    return Priority.NORMAL


@dataclass(frozen=True)
class Limits:
    max_running: int = 32
    max_queued: int = 128
    reserved: int = 2
    budget_ms: int = 10_000
    retry_after_s: int = 1

    def running_limit(self, priority: Priority) -> int:
        extra = self.reserved if priority == Priority.CRITICAL else 0
        return self.max_running + extra

    def budget_s(self, priority: Priority) -> float:
        return self.budget_ms * BUDGET_FACTOR[priority] / 1000
