"""The model part of the message-queues lab: an in-memory queue with visibility
timeouts, competing consumers and depths.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from course.labs.harness.base import (
    Cell,
    Progress,
    Tables,
    table,
)
from course.labs.harness.queueing import (
    SERVICE_TIMES,
    scenario_of,
    variability_columns,
    variability_rows,
)
from course.labs.message_queues.params import MessageQueuesParams

COMPETING_MESSAGES = 12
COMPETING_CONSUMERS = ("consumer-1", "consumer-2", "consumer-3")
# Job bodies are ours; only their order matters: the middle one is never acknowledged.
UNACKNOWLEDGED_JOBS = (
    "remind: loan #1 overdue",
    "recount: branch #1",
    "ledger: loan #1",
)
CRASHES_ON = UNACKNOWLEDGED_JOBS[1]  # the consumer stops while holding this one


@dataclass(slots=True)
class _Message:
    id: int
    body: str
    visible_at: float
    delivered: int


@dataclass(frozen=True, slots=True)
class Delivery:
    id: int
    body: str
    delivered: int


class Queue:
    """The lesson's smallest queue: write, receive, acknowledge, visibility timeout.

    Messages live in an ordered dict keyed by id (insertion order = write order),
    so an acknowledgement is O(1) where the course filters a list; the observable
    behaviour is the same and the depth experiment stays fast for large runs. An
    ``OrderedDict``, not a ``dict``: a plain dict keeps a hole where each
    acknowledged message was until it next grows, and ``receive`` walks over those
    holes from the front, so a queue that grows while it drains (2 consumers
    taking 400 of 500 jobs a round for 500 rounds) spent two seconds there.
    """

    def __init__(self, visibility: float) -> None:
        self.visibility = visibility
        self.now: float = 0
        self.total_delivered = 0
        self._messages: OrderedDict[int, _Message] = OrderedDict()
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


def model(params: MessageQueuesParams, progress: Progress) -> Tables:
    visibility = params.visibility
    progress(0.05, "unacknowledged: a consumer stops before acknowledging")
    rows, states, delivered = unacknowledged(visibility)
    progress(0.3, "competing: three consumers share twelve jobs")
    count, distinct, total, remaining = competing(visibility)
    consumer_counts = params.consumers
    depth_rows: list[list[Cell]] = []
    for i, consumers in enumerate(consumer_counts):
        progress(
            0.5 + 0.45 * i / len(consumer_counts), f"depth: {consumers} consumer(s)"
        )
        series = depths(
            consumers=consumers,
            rounds=params.rounds,
            production=params.production,
            rate=params.consumption_rate,
            visibility=visibility,
        )
        depth_rows.append([consumers, " ".join(str(d) for d in series)])
    progress(0.95, "variability: random arrivals and job lengths")
    # Times in mean job lengths: the result does not depend on consumption_rate.
    scenario = scenario_of(
        params, servers=params.variability_consumers, mean_service=1.0
    )
    loads = params.utilisations
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
        "variability": table(
            variability_columns(SERVICE_TIMES),
            variability_rows(scenario, loads, SERVICE_TIMES),
        ),
    }
