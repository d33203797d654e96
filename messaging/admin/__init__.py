"""The operator's admin for the messaging spine.

Everything here is a view on rows that only the spine's services write:

- The outbox is an append-only log (its id is the offset): no add, change or delete.
- Deliveries carry retry state a worker may be changing right now; editing them here
  would race with a claim, so they are read-only.
- Dead letters are read-only too; the one write is the "Redrive selected" action,
  which goes through ``dead_letter_redrive`` (attempts reset, due now, who and when
  recorded). The clusters view groups open letters by error: letters that failed the
  same way usually share one cause, so the records themselves give the diagnosis.

The depth admins (subscriptions, partitions, streams) follow the same rule:

- Subscriptions are read-only apart from the "Start" and "Pause" actions, which go
  through ``subscription_start``. Each row shows its depth, lag and oldest pending
  age (defined in ``selectors.subscription_depth_rows``).
- Partition leases are read-only: a worker may be renewing one right now. Each row
  shows its pending load and hot key, the page the loads of every partition.
- Stream consumers are read-only apart from "Rewind…", a confirmation page whose
  form calls ``stream_rewind``; the page shows where the log starts, since an
  offset below that is refused.

One sub-module per model, each registering its admin when imported here; ``common``
holds the helpers they share.
"""

from __future__ import annotations

# Imported for their registrations.
from messaging.admin import (  # noqa: F401
    dead_letters,
    deliveries,
    outbox,
    partitions,
    streams,
    subscriptions,
)
