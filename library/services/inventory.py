"""Inventory refresh: every branch's stock summary recomputed from its books."""

from __future__ import annotations

from django.db import transaction

from library.models import Branch
from library.subscribers import refresh_branch_stock
from messaging.models import OutboxMessage


def inventory_summary_refresh() -> int:
    """Recompute every branch's BranchStock totals; return how many branches.

    Uses the subscription's own handler, fed a message that names the branch: offset
    0 leaves the recorded last message id as it is.
    """
    branches = list(Branch.objects.order_by("id").values_list("id", flat=True))
    for branch_id in branches:
        with transaction.atomic():  # the handler locks the summary row
            refresh_branch_stock(OutboxMessage(id=0, body={"branch_id": branch_id}))
    return len(branches)
