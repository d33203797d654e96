"""The messaging spine: publish into the outbox, relay into deliveries, claim, process.

Guarantees, and where each comes from:
- A message exists iff the change it describes committed (``outbox_publish`` runs in
  the caller's transaction).
- Every accepting subscription gets exactly one delivery (unique constraint; a second
  relay of the same message inserts nothing).
- Every effect happens at most once per subscription and message (the guard row
  commits with the effect), and at least once while attempts remain (leases expire,
  the sweep re-nudges): together, exactly once.

Sub-modules, in the order a message meets them: ``publish`` (outbox and relay),
``subscriptions`` (which subscription takes which message), ``claim``, ``process``,
``partitions`` (ordered subscriptions), ``streams`` (the log read with offsets),
``drain`` (the worker's step, composing them all) and ``dead_letters`` (redrive,
discard). The names other
modules use are re-exported here.
"""

from __future__ import annotations

from messaging.services.claim import deliveries_claim, lane_subscriptions
from messaging.services.dead_letters import (
    dead_letter_discard,
    dead_letter_redrive,
    dead_letter_redrive_cluster,
)
from messaging.services.drain import DrainReport, messaging_drain, work_remaining
from messaging.services.process import Outcome, deliveries_process, delivery_process
from messaging.services.publish import outbox_publish, relay_pending
from messaging.services.subscriptions import subscription_start, subscription_states

__all__ = [
    "DrainReport",
    "Outcome",
    "dead_letter_discard",
    "dead_letter_redrive",
    "dead_letter_redrive_cluster",
    "deliveries_claim",
    "deliveries_process",
    "delivery_process",
    "lane_subscriptions",
    "messaging_drain",
    "outbox_publish",
    "relay_pending",
    "subscription_start",
    "subscription_states",
    "work_remaining",
]
