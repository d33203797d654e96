"""Lab for "Message Queues": acknowledgement, competing consumers and queue depth.

Model part, ported from the lesson's experiments on a queue with a virtual clock:

1. ``unacknowledged`` — three jobs; the first consumer acknowledges all but the second
   and stops. The clock moves on by ``visibility``; a second consumer then receives
   the abandoned job again.
2. ``competing`` — twelve jobs taken in turn by three consumers (fixed, as printed).
3. ``depth`` — per consumer count, queue depth at the end of each round when
   ``production`` jobs arrive per round and each consumer finishes
   ``consumption_rate``.

``unacknowledged`` has one row per delivery, in the order the course prints its
per-delivery lines: virtual time, which consumer, message id, how many times that
message has been handed out so far, and the consumer's verdict ("acknowledged" or
"left unacknowledged"). The course's depth/visible lines and its total
go to the extra tables ``queue_state`` and ``deliveries``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    float_param,
    int_list_param,
    int_param,
    table,
)
from messaging.registry import SUBSCRIPTIONS

COMPETING_MESSAGES = 12
COMPETING_CONSUMERS = ("consumer-1", "consumer-2", "consumer-3")
# Job bodies are ours; only their order matters: the middle one is never acknowledged.
UNACKNOWLEDGED_JOBS = (
    "remind: loan #1 overdue",
    "recount: branch #1",
    "ledger: loan #1",
)
CRASHES_ON = UNACKNOWLEDGED_JOBS[1]  # the consumer stops while holding this one


@dataclass
class _Message:
    id: int
    body: str
    visible_at: float
    delivered: int


@dataclass(frozen=True)
class Delivery:
    id: int
    body: str
    delivered: int


class Queue:
    """The lesson's smallest queue: write, receive, acknowledge, visibility timeout.

    Messages live in a dict keyed by id (insertion order = write order), so an
    acknowledgement is O(1) where the course filters a list; the observable
    behaviour is the same and the depth experiment stays fast for large runs.
    """

    def __init__(self, visibility: float) -> None:
        self.visibility = visibility
        self.now: float = 0
        self.total_delivered = 0
        self._messages: dict[int, _Message] = {}
        self._next_id = 1

    def write(self, body: str) -> int:
        message = _Message(id=self._next_id, body=body, visible_at=0, delivered=0)
        self._messages[message.id] = message
        self._next_id += 1
        return message.id

    def receive(self) -> Delivery | None:
        """Hand out the oldest visible message and hide it for ``visibility``."""
        for message in self._messages.values():
            if message.visible_at <= self.now:
                message.visible_at = self.now + self.visibility
                message.delivered += 1
                self.total_delivered += 1
                return Delivery(message.id, message.body, message.delivered)
        return None

    def acknowledge(self, message_id: int) -> bool:
        return self._messages.pop(message_id, None) is not None

    def advance(self, ms: float) -> None:
        self.now += ms

    @property
    def depth(self) -> int:
        return len(self._messages)

    @property
    def visible(self) -> int:
        return sum(1 for m in self._messages.values() if m.visible_at <= self.now)


def unacknowledged(visibility: float) -> tuple[list[list[Cell]], list[list[Cell]], int]:
    """Return (delivery rows, queue-state rows, total deliveries)."""
    queue = Queue(visibility)
    for body in UNACKNOWLEDGED_JOBS:
        queue.write(body)
    rows: list[list[Cell]] = []
    states: list[list[Cell]] = []

    message = queue.receive()
    while message is not None:
        acknowledged = message.body != CRASHES_ON
        if acknowledged:
            queue.acknowledge(message.id)
        status = "acknowledged" if acknowledged else "left unacknowledged"
        rows.append([queue.now, "consumer-1", message.id, message.delivered, status])
        message = queue.receive()
    states.append([queue.now, queue.depth, queue.visible])

    queue.advance(visibility)  # the timeout runs out for the abandoned job
    states.append([queue.now, queue.depth, queue.visible])

    message = queue.receive()
    while message is not None:
        queue.acknowledge(message.id)
        rows.append(
            [queue.now, "consumer-2", message.id, message.delivered, "acknowledged"]
        )
        message = queue.receive()
    states.append([queue.now, queue.depth, queue.visible])
    return rows, states, queue.total_delivered


def competing(visibility: float) -> tuple[dict[str, int], int, int, int]:
    """Return (messages per consumer, distinct, total delivered, remaining)."""
    queue = Queue(visibility)
    for i in range(1, COMPETING_MESSAGES + 1):
        queue.write(f"remind: loan #{i} overdue")
    taken_by: dict[int, str] = {}
    count = dict.fromkeys(COMPETING_CONSUMERS, 0)
    turn = 0
    while queue.depth > 0:
        name = COMPETING_CONSUMERS[turn % len(COMPETING_CONSUMERS)]
        message = queue.receive()
        if message is None:
            break
        taken_by[message.id] = name
        count[name] += 1
        queue.acknowledge(message.id)
        turn += 1
    return count, len(taken_by), queue.total_delivered, queue.depth


def depths(
    *, consumers: int, rounds: int, production: int, rate: int, visibility: float
) -> list[int]:
    """Return the queue depth at the end of each round."""
    queue = Queue(visibility)
    result: list[int] = []
    for t in range(1, rounds + 1):
        for n in range(production):
            queue.write(f"round {t} job {n}")
        for _ in range(consumers * rate):
            message = queue.receive()
            if message is None:
                break
            queue.acknowledge(message.id)
        queue.advance(1000)  # one round of virtual time
        result.append(queue.depth)
    return result


def model(params: Params, progress: Progress) -> Tables:
    visibility = float_param(params, "visibility")
    progress(0.05, "unacknowledged: a consumer stops before acknowledging")
    rows, states, delivered = unacknowledged(visibility)
    progress(0.3, "competing: three consumers share twelve jobs")
    count, distinct, total, remaining = competing(visibility)
    consumer_counts = int_list_param(params, "consumers")
    depth_rows: list[list[Cell]] = []
    for i, consumers in enumerate(consumer_counts):
        progress(
            0.5 + 0.45 * i / len(consumer_counts), f"depth: {consumers} consumer(s)"
        )
        series = depths(
            consumers=consumers,
            rounds=int_param(params, "rounds"),
            production=int_param(params, "production"),
            rate=int_param(params, "consumption_rate"),
            visibility=visibility,
        )
        depth_rows.append([consumers, " ".join(str(d) for d in series)])
    return {
        "unacknowledged": table(
            ["t", "consumer", "message", "delivered", "status"], rows
        ),
        "competing": table(
            ["consumer", "messages"], [[name, n] for name, n in count.items()]
        ),
        "depth": table(["consumers", "depths"], depth_rows),
        "queue_state": table(["t", "depth", "visible"], states),
        "deliveries": table(
            ["experiment", "written", "distinct", "delivered", "remaining"],
            [
                [
                    "unacknowledged",
                    len(UNACKNOWLEDGED_JOBS),
                    len({row[2] for row in rows}),
                    delivered,
                    states[-1][1],
                ],
                ["competing", COMPETING_MESSAGES, distinct, total, remaining],
            ],
        ),
    }


# --- live part ---------------------------------------------------------------------

LIVE_MESSAGES = 3
LIVE_CRASHES_ON = 2  # the second probe's first worker dies holding its lease


def _worker_label(owner: str) -> str:
    """Name the process that held a lease ("host:pid:nonce" → "work-horse pid")."""
    parts = owner.split(":")
    return f"work-horse {parts[1]}" if len(parts) == 3 else owner or "?"


def _owner_gone(owner: str) -> bool:
    """Return whether the lease owner's process has exited (True if not local)."""
    import socket

    from course.labs.live import process_gone

    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's worker: its lease expiring is the evidence
    return process_gone(int(pid))


def live(params: Params, progress: Progress) -> Tables:
    """Three probes through the real spine; the second one's first worker dies.

    Each probe is published after the previous one was claimed, in the course's
    order, so no claim batch holds two of them. The dead worker's lease is the
    ``lab_probe`` subscription's two seconds, not the ``visibility`` parameter.
    """
    import time

    from course.labs import live as harness
    from messaging.models import Delivery as DeliveryRow

    def delivery(message_id: int) -> DeliveryRow:
        row: DeliveryRow = harness.probe_deliveries([message_id]).get()
        return row

    def redelivered_or_gone(message_id: int, owner: str) -> bool:
        return _owner_gone(owner) or harness.delivery_reached(message_id, attempts=2)

    run = harness.new_run_id()
    rows: list[list[Cell]] = []
    ids: dict[int, int] = {}
    with harness.live_system(run=run, progress=progress) as system:
        for seq in range(1, LIVE_MESSAGES + 1):
            harness.live_step(progress, 0.1 + 0.2 * seq, f"probe {seq} published")
            crash = {seq} if seq == LIVE_CRASHES_ON else set()
            ids.update(harness.publish_probes(run, [seq], crash_once=crash))
            message_id = ids[seq]
            if not crash:
                harness.wait_until(
                    partial(harness.delivery_reached, message_id, done=True),
                    what=f"probe {seq}",
                    timeout=30,
                    system=system,
                )
                row = delivery(message_id)
                rows.append(
                    [seq, _worker_label(row.lease_owner), row.attempts, "acknowledged"]
                )
                continue
            harness.wait_until(
                partial(harness.delivery_reached, message_id, attempts=1),
                what=f"the first claim of probe {seq}",
                timeout=30,
                system=system,
            )
            first_claim = time.monotonic()
            held = delivery(message_id)
            harness.wait_until(
                partial(redelivered_or_gone, message_id, held.lease_owner),
                what=f"the death of probe {seq}'s worker",
                timeout=30,
                system=system,
            )
            rows.append(
                [
                    seq,
                    _worker_label(held.lease_owner),
                    held.attempts,
                    "died holding the lease",
                ]
            )
        harness.live_step(progress, 0.8, "waiting for the lease to run out")
        crashed = ids[LIVE_CRASHES_ON]
        harness.wait_until(
            partial(harness.delivery_reached, crashed, attempts=2),
            what=f"the redelivery of probe {LIVE_CRASHES_ON}",
            timeout=30,
            system=system,
        )
        redelivered_after = time.monotonic() - first_claim
        harness.wait_until(
            lambda: harness.deliveries_settled(ids.values()),
            what="the probes",
            timeout=30,
            system=system,
        )
        again = delivery(crashed)
        rows.append(
            [
                LIVE_CRASHES_ON,
                _worker_label(again.lease_owner),
                again.attempts,
                "acknowledged after the lease ran out",
            ]
        )
        deliveries = harness.attempts_total(ids.values())
    lease = SUBSCRIPTIONS[harness.PROBE_SUBSCRIPTION].visibility
    lease_s = lease.total_seconds() if lease is not None else None
    return {
        "live_unacknowledged": table(["message", "worker", "attempt", "outcome"], rows),
        "live_deliveries": table(
            ["messages", "deliveries", "lease_s", "redelivered_after_s"],
            [[LIVE_MESSAGES, deliveries, lease_s, round(redelivered_after, 1)]],
        ),
    }


LAB = Lab(
    slug="message-queues",
    title="Message Queues",
    params=(
        Param(
            "visibility",
            "float",
            30.0,
            "visibility timeout, and how far the clock moves before consumer-2",
            minimum=0,
            exclusive_minimum=True,
            maximum=1e6,
        ),
        Param(
            "consumers",
            "int_list",
            [1, 2, 3],
            "consumer counts for the depth run",
            minimum=1,
            maximum=100,
            max_items=10,
        ),
        Param("rounds", "int", 6, "rounds in the depth run", minimum=1, maximum=500),
        Param("production", "int", 5, "jobs written per round", minimum=0, maximum=500),
        Param(
            "consumption_rate",
            "int",
            3,
            "jobs each consumer finishes per round",
            minimum=0,
            maximum=500,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="depth",
            label="consumers",
            values=("depths",),
            title="Queue depth at the end of each round",
            unit="messages",
            split=True,
            category_prefix="round ",
        ),
        Chart(
            table="competing",
            label="consumer",
            values=("messages",),
            title="Messages handled per competing consumer",
            unit="messages",
        ),
    ),
)
