"""The lab's live part: the same question asked of the real application."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from django.db import connection

from config.processes import WaitTimeout, wait_until
from course.instruments.websocket_client import RawWebSocket
from course.labs.broadcast_and_channel_management.model import COLUMNS, MODES, WAIT_S
from course.labs.broadcast_and_channel_management.params import (
    BroadcastParams,
)
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    accepts_all,
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


@dataclass(frozen=True)
class Layer:
    """One broadcast through a channel layer: who saw it, what the group counted."""

    layer: str
    saw: int  # subscribers whose socket got the update
    before: dict[str, int]  # the group's counters before the broadcast
    after: dict[str, int]  # and once its deliveries were counted


@dataclass(frozen=True)
class Measurement:
    layers: list[Layer]


def _run_mode(layer: str, instances: int, branch: int) -> Layer:
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
    return Layer(layer, saw, before, after)


def _deliveries_settled(group: str, expected: int) -> dict[str, int]:
    """Return the group's counters once they show ``expected`` deliveries.

    The consumer counts a delivery just after writing the frame, so a frame the
    client holds may not be counted yet; a count that never arrives is reported as
    it stands after WAIT_S.
    """

    def reached() -> dict[str, int] | None:
        counts = counters_read([group])[group]
        return counts if counts["deliveries"] >= expected else None

    try:
        return wait_until(reached, f"{expected} deliveries", timeout=WAIT_S)
    except WaitTimeout:
        return counters_read([group])[group]


def measure(params: BroadcastParams, progress: Progress) -> Measurement:
    """Broadcast once per channel layer to sockets on the other daphnes; count."""
    if connection.in_atomic_block:
        raise LabError("live: run the live part outside a database transaction")
    branch = Branch.objects.order_by("id").values_list("id", flat=True).first()
    if branch is None:
        raise LabError("live: the database has no branch; load the demo data first")
    instances = params.instances
    layers: list[Layer] = []
    for index, layer in enumerate(MODES):
        progress(0.1 + 0.45 * index, f"live: {instances} daphnes, {layer} layer")
        layers.append(_run_mode(layer, instances, branch))
    return Measurement(layers)


def tables(params: BroadcastParams, measured: Measurement) -> Tables:
    """Per layer: sockets that saw the update, broadcasts and deliveries counted."""
    rows: list[list[Cell]] = [
        [
            found.layer,
            found.saw,
            found.after["broadcasts"] - found.before["broadcasts"],
            found.after["deliveries"] - found.before["deliveries"],
        ]
        for found in measured.layers
    ]
    return {"live_delivery": table(COLUMNS, rows)}


LIVE = LivePart(check=accepts_all, measure=measure, tables=tables)
