"""What the loan child of the live labs and the lab that starts it share.

``labchild loans`` (``course.management.commands.labchild``) issues loans and hands
their side jobs off, then dies; the rationale lab
(``course.labs.rationale_for_asynchronous_processing.live``) starts it and counts
which side jobs ever ran. Both need the same list of side jobs and the same delay,
so they are here, below both.
"""

from __future__ import annotations

from typing import Final

from messaging.registry import MessageType, subscriptions_for

# The in-memory thread waits this long before each side job: the responses are out
# and the process is killed long before any of them would have run, even when the
# later loans wait for the database's write lock. (The lab waits this long once more
# to show that none of them ever runs.)
SIDE_JOB_DELAY_S: Final = 3.0


def loan_side_jobs() -> list[str]:
    """Return the side jobs of one loan: the subscriptions a loan message reaches."""
    return [s.name for s in subscriptions_for(MessageType.LOAN_ISSUED)]
