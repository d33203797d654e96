"""A lab-only route: broadcast a branch's stock from inside this daphne process.

``POST /_lab/broadcast/<branch_id>/`` sends the branch's current state to its group
through ``realtime.broadcast.broadcasts_send``, the path the outbox's
``broadcast_flush`` takes, but from this server's own process. With the Redis
channel layer every instance's members get it; with the in-process layer
(``LIBRARY_CHANNEL_LAYER=memory``) only this instance's do. The broadcast lab
needs exactly that contrast. The route answers 404 unless ``LAB_ROUTES`` is on
(only the daphnes the labs, tests and benchmarks start).
"""

from __future__ import annotations

import time

from channels.layers import get_channel_layer
from django.conf import settings
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from library.models import Branch
from library.selectors.stock import branch_stock_state
from realtime.broadcast import broadcasts_send


@csrf_exempt
@require_POST
def lab_broadcast(request: HttpRequest, branch_id: int) -> JsonResponse:
    """Send one ``stock.update`` for the branch's first book; answer what was sent."""
    if not settings.LAB_ROUTES:
        raise Http404("lab routes are off")
    if not Branch.objects.filter(pk=branch_id).exists():
        raise Http404("no such branch")
    state = branch_stock_state(branch_id)
    book = next(iter(state["books"]), None)
    event = {
        "type": "stock.update",
        "branch": branch_id,
        "version": state["version"],
        "total": state["total"],
        "book": int(book) if book is not None else 0,
        "on_shelf": state["books"].get(book, 0) if book is not None else 0,
        "offset": 0,
        # Wall-clock send time, so a receiver in another process can time delivery.
        "sent_at": time.time(),
    }
    group = f"branch-{branch_id}"
    broadcasts_send(get_channel_layer(), [(group, event)])
    return JsonResponse({"group": group, "sent_at": event["sent_at"]}, status=202)
