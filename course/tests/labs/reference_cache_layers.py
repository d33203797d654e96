"""An independent re-implementation of the cache-layers model, written differently.

It shares no code with ``course/labs``: caches use OrderedDict, shares round with
Fractions.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from course.tests.labs.reference import Generator, to_fixed_1


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
