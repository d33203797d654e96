"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

from course.instruments.websocket_client import RawWebSocket
from course.labs.broadcast_and_channel_management.model import COLUMNS, MODES, WAIT_S
from course.labs.harness.base import (
    Cell,
    LabError,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.harness.live_http import daphne_processes, host_header
from library.models import Branch
from realtime.accounting import counters_read


@contextmanager
def layer_daphnes(count: int, layer: str) -> Iterator[list[int]]:
    """Start ``count`` daphnes with channel layer ``layer``; yield their ports."""

    env = {
        "LOG_LEVEL": "WARNING",
        "LIBRARY_CHANNEL_LAYER": layer,
        "LIBRARY_LAB_ROUTES": "on",
    }
    with daphne_processes([env] * count, what=f"daphne ({layer} layer)") as started:
        yield [port for port, _ in started]


def _run_mode(layer: str, instances: int, branch: int) -> list[Cell]:
    import httpx

    group = f"branch-{branch}"
    path = f"/ws/branches/{branch}/stock/"
    with layer_daphnes(instances, layer) as ports:
        subscribers = []
        for port in ports[1:]:
            host = host_header(port)
            ws = RawWebSocket.connect(
                "127.0.0.1",
                port,
                path,
                headers={"Host": host, "Origin": f"http://{host}"},
            )
            ws.receive()  # the snapshot: subscribed from here on
            subscribers.append(ws)
        before = counters_read([group])[group]
        first = ports[0]
        headers = {"Host": host_header(first), "X-Forwarded-Proto": "https"}
        answer = httpx.post(
            f"http://127.0.0.1:{first}/_lab/broadcast/{branch}/",
            headers=headers,
            timeout=30,
        )
        if answer.status_code != 202:
            raise LabError(f"live: the broadcast route answered {answer.status_code}")
        saw = 0
        for ws in subscribers:
            ws.sock.settimeout(WAIT_S)
            try:
                frame = ws.receive()
                saw += json.loads(frame.payload).get("type") == "update"
            except TimeoutError:
                pass
            ws.abort()
        after = _deliveries_settled(group, before["deliveries"] + saw)
    return [
        layer,
        saw,
        after["broadcasts"] - before["broadcasts"],
        after["deliveries"] - before["deliveries"],
    ]


def _deliveries_settled(group: str, expected: int) -> dict[str, int]:
    """Return the group's counters once they show ``expected`` deliveries.

    The consumer counts a delivery just after writing the frame, so a frame the
    client holds may not be counted yet; a count that never arrives is reported as
    it stands after WAIT_S.
    """

    deadline = time.monotonic() + WAIT_S
    while True:
        counts = counters_read([group])[group]
        if counts["deliveries"] >= expected or time.monotonic() > deadline:
            return counts
        time.sleep(0.02)


def live(params: Params, progress: Progress) -> Tables:
    from django.db import connection

    if connection.in_atomic_block:
        raise LabError("live: run the live part outside a database transaction")
    branch = Branch.objects.order_by("id").values_list("id", flat=True).first()
    if branch is None:
        raise LabError("live: the database has no branch; load the demo data first")
    instances = int_param(params, "instances")
    rows = []
    for index, layer in enumerate(MODES):
        progress(0.1 + 0.45 * index, f"live: {instances} daphnes, {layer} layer")
        rows.append(_run_mode(layer, instances, branch))
    return {"live_delivery": table(COLUMNS, rows)}
