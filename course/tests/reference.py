"""Independent re-implementations of the labs' models, written differently on purpose.

They share no code with ``course/labs``: the generator reproduces the double rounding
with exact integers plus one int->float conversion, caches use OrderedDict, shares
round with Fractions, and queue depth uses its closed recurrence instead of a queue.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from fractions import Fraction
from typing import Any

A, C, M = 1103515245, 12345, 2**31


class Generator:
    """The course's generator; the state is always an integer-valued double.

    ``float(state * A)`` rounds the exact product to the nearest double, which is what
    IEEE multiplication of two exactly representable integers does; the sum with C is
    then a double addition, and the remainder of an integer-valued double is exact.
    """

    def __init__(self, seed: int) -> None:
        self.state = seed

    def next(self) -> float:
        self.state = int(float(self.state * A) + float(C)) % M
        return self.state / M

    def pick(self, n: int) -> int:
        return math.floor(self.next() * n)


def to_fixed_1(value: float) -> float | None:
    """Number(value.toFixed(1)) via Fractions: the exact double, ties away from zero."""
    if math.isnan(value):
        return None
    exact = Fraction(value)
    sign = -1 if exact < 0 else 1
    tenths = math.floor(abs(exact) * 10 + Fraction(1, 2))
    return float(Fraction(sign * tenths, 10))


class FifoCache:
    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[str, int] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def put(self, key: str) -> None:
        self.data[key] = 1
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)


def cache_layers(
    requests: int,
    users: int,
    seed: int,
    client_capacity: int,
    edge_capacity: int,
    server_capacity: int,
) -> dict[str, Any]:
    gen = Generator(seed)
    keys = []
    for _ in range(requests):
        r = gen.next()
        if r < 0.7:
            keys.append(f"book:{gen.pick(20) + 1}")
        elif r < 0.9:
            keys.append(f"branch:{gen.pick(4) + 1}")
        else:
            keys.append(f"member:{gen.pick(50) + 1}")
    unique = len(set(keys))
    repetition = [[requests, unique, requests, requests - unique]]

    gen = Generator(seed)
    client_caches: dict[int, FifoCache] = {}
    edge, server = FifoCache(edge_capacity), FifoCache(server_capacity)
    hits = {"client": 0, "edge": 0, "server": 0, "origin": 0}
    for _ in range(requests):
        user = gen.pick(users) + 1
        r = gen.next()
        if r < 0.7:
            kind, ident = "book", gen.pick(20) + 1
        elif r < 0.9:
            kind, ident = "branch", gen.pick(4) + 1
        else:
            kind, ident = "member", user
        key = f"{kind}:{ident}"
        public = kind != "member"
        mine = client_caches.setdefault(user, FifoCache(client_capacity))
        if key in mine:
            hits["client"] += 1
            continue
        if public and key in edge:
            hits["edge"] += 1
        else:
            skey = key if public else f"{key}#{user}"
            if skey in server:
                hits["server"] += 1
            else:
                hits["origin"] += 1
                server.put(skey)
        if public:
            edge.put(key)
        mine.put(key)
    chain = [
        [layer, n, to_fixed_1(n / requests * 100 if requests else math.nan)]
        for layer, n in hits.items()
    ]
    return {"repetition": repetition, "chain": chain}


def queue_depths(consumers: int, rounds: int, production: int, rate: int) -> str:
    depth, out = 0, []
    for _ in range(rounds):
        depth = max(0, depth + production - consumers * rate)
        out.append(depth)
    return " ".join(map(str, out))


def unacknowledged_rows(visibility: float) -> list[list[object]]:
    v: object = int(visibility) if float(visibility).is_integer() else visibility
    return [
        [0, "consumer-1", 1, 1, "acknowledged"],
        [0, "consumer-1", 2, 1, "left unacknowledged"],
        [0, "consumer-1", 3, 1, "acknowledged"],
        [v, "consumer-2", 2, 2, "acknowledged"],
    ]
