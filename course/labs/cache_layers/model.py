"""The model part of the cache-layers lab: the request streams, the counting origin and
the client / edge / server chain, computed in-process.
"""

from __future__ import annotations

from course.labs.cache_layers.params import CacheLayersParams
from course.labs.harness.base import Cell, Progress, Tables, table
from course.labs.harness.jsnum import JsLcg, js_fixed_number

# Kinds whose answer is the same for every member, so shared caches may keep them.
SHARED_KINDS = frozenset({"book", "branch"})
BOOKS = 20  # the stream concentrates on the first 20 titles
BRANCHES = 4
STREAM_MEMBERS = 50  # the repetition stream reads histories of members 1..50
LAYERS = ("client", "edge", "server", "origin")


class CountingOrigin:
    """Stand-in for the origin database: answers every read and counts it."""

    def __init__(self) -> None:
        self.queries = 0

    def read(self, kind: str, ident: int) -> tuple[str, int]:
        self.queries += 1
        return (kind, ident)


class SmallCache:
    """Bounded cache that forgets its oldest *write* when full.

    As in the course, a write re-inserts the key at the young end but a read does not
    refresh it, so this is insertion-order eviction, not LRU. Python dicts keep
    insertion order, which gives the same behaviour as the course's Map.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._box: dict[str, object] = {}

    def lookup(self, key: str) -> tuple[bool, object]:
        """Return (present, value) without touching the eviction order."""
        if key in self._box:
            return True, self._box[key]
        return False, None

    def set(self, key: str, value: object) -> None:
        self._box.pop(key, None)
        self._box[key] = value
        if len(self._box) > self.capacity:
            del self._box[next(iter(self._box))]


def request_stream(count: int, seed: int) -> list[tuple[str, int]]:
    """Return the course's request stream: 70 % book, 20 % branch, 10 % member."""
    rng = JsLcg(seed)
    requests: list[tuple[str, int]] = []
    for _ in range(count):
        r = rng.random()
        if r < 0.7:
            requests.append(("book", rng.below(BOOKS) + 1))
        elif r < 0.9:
            requests.append(("branch", rng.below(BRANCHES) + 1))
        else:
            requests.append(("member", rng.below(STREAM_MEMBERS) + 1))
    return requests


def repetition(requests: int, seed: int) -> list[int]:
    """Return the ``repetition`` row: every request goes to the origin uncached."""
    origin = CountingOrigin()
    stream = request_stream(requests, seed)
    for kind, ident in stream:
        origin.read(kind, ident)
    unique = len({f"{kind}:{ident}" for kind, ident in stream})
    return [len(stream), unique, origin.queries, origin.queries - unique]


def chain_counts(
    *,
    requests: int,
    users: int,
    seed: int,
    client_capacity: int,
    edge_capacity: int,
    server_capacity: int,
    progress: Progress,
) -> dict[str, int]:
    """Return how many requests each layer answered in the four-layer chain."""
    origin = CountingOrigin()
    clients: dict[int, SmallCache] = {}
    edge = SmallCache(edge_capacity)
    server = SmallCache(server_capacity)
    counter = dict.fromkeys(LAYERS, 0)

    def read(user: int, kind: str, ident: int) -> object:
        key = f"{kind}:{ident}"
        shared = kind in SHARED_KINDS
        client = clients.setdefault(user, SmallCache(client_capacity))

        def copy_closer(value: object) -> object:
            # An answer found further down is copied into the layers in front of it.
            if shared:
                edge.set(key, value)
            client.set(key, value)
            return value

        # Walk the chain from the user outwards; the first layer holding the key wins.
        found, value = client.lookup(key)
        if found:
            counter["client"] += 1
            return value
        found, value = edge.lookup(key) if shared else (False, None)
        if found:
            counter["edge"] += 1
            return copy_closer(value)
        # A private answer is keyed by its owner so the server never hands it to
        # somebody else.
        server_key = key if shared else f"{key}@{user}"
        found, value = server.lookup(server_key)
        if found:
            counter["server"] += 1
            return copy_closer(value)
        counter["origin"] += 1
        fetched = origin.read(kind, ident)
        server.set(server_key, fetched)
        return copy_closer(fetched)

    step = max(1, requests // 10)
    for i, (user, kind, ident) in enumerate(chain_stream(requests, users, seed)):
        if i % step == 0:
            progress(0.2 + 0.75 * i / requests, f"chain: request {i + 1} of {requests}")
        read(user, kind, ident)
    assert counter["origin"] == origin.queries
    return counter


def chain_stream(requests: int, users: int, seed: int) -> list[tuple[int, str, int]]:
    """Return the chain's (user, kind, id) requests; members read their own history."""
    rng = JsLcg(seed)
    stream: list[tuple[int, str, int]] = []
    for _ in range(requests):
        user = rng.below(users) + 1
        r = rng.random()
        kind = "book" if r < 0.7 else "branch" if r < 0.9 else "member"
        if kind == "book":
            ident = rng.below(BOOKS) + 1
        elif kind == "branch":
            ident = rng.below(BRANCHES) + 1
        else:
            ident = user
        stream.append((user, kind, ident))
    return stream


def model(params: CacheLayersParams, progress: Progress) -> Tables:
    requests, seed = params.requests, params.seed
    progress(0.05, "repetition: every request goes to the origin")
    repeated = repetition(requests, seed)
    progress(0.2, "chain: client, edge, server, origin")
    counts = chain_counts(
        requests=requests,
        users=params.users,
        seed=seed,
        client_capacity=params.client_capacity,
        edge_capacity=params.edge_capacity,
        server_capacity=params.server_capacity,
        progress=progress,
    )
    # The course prints (n / requests * 100).toFixed(1); with no requests that is NaN.
    chain_rows: list[list[Cell]] = [
        [layer, counts[layer], js_fixed_number(share_pct(counts[layer], requests))]
        for layer in LAYERS
    ]
    return {
        "repetition": table(
            ["requests", "unique_keys", "origin_queries", "repeat_queries"],
            [list(repeated)],
        ),
        "chain": table(["layer", "requests", "share_pct"], chain_rows),
    }


def share_pct(part: int, whole: int) -> float:
    return part / whole * 100 if whole else float("nan")
