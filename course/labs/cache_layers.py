"""Lab for "Cache Layers": how much a read path repeats itself, and who absorbs it.

Model part, ported from the lesson's two experiments:

1. ``repetition`` — a stream of book / branch / member reads goes straight to the
   origin; the gap between requests and distinct keys is the repeated work.
2. ``chain`` — the same kind of stream passes a per-user client cache, a shared edge
   cache (shared resources only) and a server cache before the origin; each request
   is credited to the first layer that answers it.

The origin here counts reads instead of querying a database. Only the number of reads
appears in the tables, and what a read returns never steers a request to a different
layer, so an in-memory SQLite copy of the course's data would add run time and
nothing measurable. The live part (``live``) sends the same streams over real HTTP
to the application and counts the origin calls its server cache made.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from course.labs.base import (
    Cell,
    Chart,
    Lab,
    Param,
    Params,
    Progress,
    Tables,
    int_param,
    table,
)
from course.labs.jsnum import SEED_MAX, JsLcg, js_fixed_number

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


def model(params: Params, progress: Progress) -> Tables:
    requests, seed = int_param(params, "requests"), int_param(params, "seed")
    progress(0.05, "repetition: every request goes to the origin")
    repeated = repetition(requests, seed)
    progress(0.2, "chain: client, edge, server, origin")
    counts = chain_counts(
        requests=requests,
        users=int_param(params, "users"),
        seed=seed,
        client_capacity=int_param(params, "client_capacity"),
        edge_capacity=int_param(params, "edge_capacity"),
        server_capacity=int_param(params, "server_capacity"),
        progress=progress,
    )
    # The course prints (n / requests * 100).toFixed(1); with no requests that is NaN.
    chain_rows: list[list[Cell]] = [
        [layer, counts[layer], js_fixed_number(_share(counts[layer], requests))]
        for layer in LAYERS
    ]
    return {
        "repetition": table(
            ["requests", "unique_keys", "origin_queries", "repeat_queries"],
            [list(repeated)],
        ),
        "chain": table(["layer", "requests", "share_pct"], chain_rows),
    }


def _share(part: int, whole: int) -> float:
    return part / whole * 100 if whole else float("nan")


# --- live part: real HTTP through a client cache and an edge to a real daphne -------

LIVE_KINDS = {"book": "book", "branch": "stock", "member": "history"}  # -> namespace
LIVE_NAMESPACES = tuple(LIVE_KINDS.values())
# Whole anonymous pages (``library.cache.pages``): a hit there is the server layer
# too, and the tier makes no origin call of its own (a miss runs the view).
PAGE_NAMESPACE = "page"
COUNTED_NAMESPACES = (*LIVE_NAMESPACES, PAGE_NAMESPACE)


def directives_of(header: str | None) -> dict[str, str | None]:
    """Return the directives of a Cache-Control value, names lower-cased."""
    directives: dict[str, str | None] = {}
    for part in (header or "").split(","):
        name, _, value = part.strip().partition("=")
        if name:
            directives[name.strip().lower()] = value.strip().strip('"') or None
    return directives


def _seconds(value: str | None) -> float | None:
    try:
        return float(int(value or ""))
    except ValueError:
        return None


def freshness_s(directives: dict[str, str | None], *, shared: bool) -> float | None:
    """Return how long a cache may serve the response without asking, or None.

    None means the response may not be kept: ``no-store`` anywhere, ``private`` or a
    missing ``public`` in a shared cache (the lab's edge keeps only what the origin
    declared public), ``no-cache`` or no lifetime at all. A shared cache prefers
    ``s-maxage``; a private one reads only ``max-age``.
    """
    if "no-store" in directives or "no-cache" in directives:
        return None
    if shared and ("private" in directives or "public" not in directives):
        return None
    lifetime = _seconds(directives.get("max-age"))
    if shared and "s-maxage" in directives:
        lifetime = _seconds(directives["s-maxage"])
    return lifetime


@dataclass
class Stored:
    stored_at: float  # clock reading when the response left the origin
    fresh_until: float
    cache_control: str


class HttpCache:
    """A bounded cache of responses by path that obeys their Cache-Control.

    Eviction follows the model so the two runs can be compared request by request:
    the client forgets its oldest write (a read does not refresh the order), the edge
    moves an entry to the young end whenever it answers, as the model's edge is
    rewritten on every hit.
    """

    def __init__(self, capacity: int, *, shared: bool) -> None:
        self.capacity = capacity
        self.shared = shared
        self._box: dict[str, Stored] = {}

    def lookup(self, path: str, now: float) -> Stored | None:
        """Return the fresh entry of ``path``; an expired one is dropped."""
        entry = self._box.get(path)
        if entry is None:
            return None
        if entry.fresh_until <= now:
            del self._box[path]
            return None
        if self.shared:
            self._box[path] = self._box.pop(path)
        return entry

    def offer(
        self, path: str, cache_control: str, *, stored_at: float, now: float
    ) -> bool:
        """Keep a response if its directives allow it; return whether it was kept.

        ``stored_at`` is when the response was produced upstream, so a copy taken from
        the edge is only fresh for what is left of its lifetime (the ``Age`` rule).
        """
        lifetime = freshness_s(directives_of(cache_control), shared=self.shared)
        if lifetime is None or stored_at + lifetime <= now:
            return False
        self._box.pop(path, None)
        self._box[path] = Stored(stored_at, stored_at + lifetime, cache_control)
        if len(self._box) > self.capacity:
            del self._box[next(iter(self._box))]
        return True


@dataclass(frozen=True)
class LivePages:
    """The real rows standing for the model's ids: id N is the N-th row by key."""

    books: list[int]
    branches: list[int]
    members: list[int]

    def path(self, kind: str, ident: int) -> str:
        if kind == "book":
            return f"/books/{self.books[ident - 1]}/"
        if kind == "branch":
            return f"/branches/{self.branches[ident - 1]}/"
        return f"/members/{self.members[ident - 1]}/"

    @property
    def flush_path(self) -> str:
        # A catalogue page: the ``list`` namespace, which this lab does not count.
        return f"/branches/{self.branches[0]}/books/"


def _live_pages(members_needed: int) -> LivePages:
    from course.labs.base import LabError
    from library.models import Book, Branch, Member

    def first(model: type[Book] | type[Branch] | type[Member], count: int) -> list[int]:
        ids = [
            int(pk)
            for pk in model.objects.order_by("pk").values_list("pk", flat=True)[:count]
        ]
        if len(ids) < count:
            raise LabError(
                f"live: the stream reads {count} {model._meta.verbose_name_plural}, "
                f"the database has {len(ids)} (manage.py seed_library makes enough)"
            )
        return ids

    return LivePages(
        books=first(Book, BOOKS),
        branches=first(Branch, BRANCHES),
        members=first(Member, members_needed),
    )


@dataclass
class ChainRun:
    layers: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LAYERS, 0))
    sent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LIVE_KINDS, 0))
    wall_s: float = 0.0


def _get(client: Any, path: str, *, anonymous: bool) -> Any:
    from course.labs.base import LabError

    response = client.get(path)
    if response.status_code != 200:
        raise LabError(f"live: GET {path} answered {response.status_code}")
    if anonymous:
        # An anonymous visitor keeps no cookie: one sent back would make the page
        # vary per visitor (Vary: Cookie) and no shared cache could share it.
        client.cookies.clear()
    return response


def chain_live(
    stream: list[tuple[int, str, int]],
    pages: LivePages,
    *,
    anonymous: Any,
    signed_in: Any,
    client_capacity: int,
    edge_capacity: int,
    progress: Progress,
) -> ChainRun:
    """Send the chain stream through per-user client caches and the edge, in order.

    Only a request neither cache can answer is sent over HTTP; its response is then
    offered to the edge and to the user's client cache, which keep it as far as its
    Cache-Control allows. Book and branch pages are read anonymously (they are the
    same for everyone); a member's history carries the session of a signed-in staff
    account, since the page is private. The clock is the real one.
    """
    from course.labs.live import live_step

    run = ChainRun()
    clients: dict[int, HttpCache] = {}
    edge = HttpCache(edge_capacity, shared=True)
    started = time.monotonic()
    step = max(1, len(stream) // 10)
    for i, (user, kind, ident) in enumerate(stream):
        if i % step == 0:
            live_step(
                progress,
                0.1 + 0.5 * i / len(stream),
                f"chain: request {i + 1} of {len(stream)}",
            )
        path = pages.path(kind, ident)
        client = clients.setdefault(user, HttpCache(client_capacity, shared=False))
        now = time.monotonic()
        if client.lookup(path, now) is not None:
            run.layers["client"] += 1
            continue
        found = edge.lookup(path, now)
        if found is not None:
            run.layers["edge"] += 1
            client.offer(path, found.cache_control, stored_at=found.stored_at, now=now)
            continue
        private = kind == "member"
        response = _get(
            signed_in if private else anonymous, path, anonymous=not private
        )
        arrived = time.monotonic()
        produced = arrived - (_seconds(response.headers.get("age")) or 0.0)
        directives = response.headers.get("cache-control", "")
        edge.offer(path, directives, stored_at=produced, now=arrived)
        client.offer(path, directives, stored_at=produced, now=arrived)
        run.sent[kind] += 1
    run.wall_s = time.monotonic() - started
    return run


def repetition_live(
    stream: list[tuple[str, int]], pages: LivePages, *, anonymous: Any, signed_in: Any
) -> float:
    """Send every request of the repetition stream over HTTP; return the wall time."""
    started = time.monotonic()
    for kind, ident in stream:
        private = kind == "member"
        path = pages.path(kind, ident)
        _get(signed_in if private else anonymous, path, anonymous=not private)
    return time.monotonic() - started


def live(params: Params, progress: Progress) -> Tables:
    """Run both streams against the real application over HTTP.

    1. Two daphne processes start on this database and Redis: one with the cache
       (``LIBRARY_CACHE=on``), one without (``off``). The model's ids map to real
       rows: book N is the N-th book by id, likewise branches and members.
    2. The server cache is made cold for every page the run reads.
    3. ``chain``: the model's stream, request by request, through a client cache per
       user (``client_capacity`` entries) and a shared edge (``edge_capacity``) that
       obey each response's Cache-Control; what they cannot answer goes over HTTP to
       the cached daphne. The origin's share is the origin calls the server itself
       counted (``library.cache.metrics``, namespaces book, stock and history);
       ``server`` is the HTTP requests it answered from its cache.
    4. ``repetition``: the model's other stream, every request over HTTP to the
       uncached daphne; each one is an origin call.

    Why the counts match the model's: the server cache never forgets an entry during
    a run (Redis is not bounded by ``server_capacity``; the model's 200 entries
    exceed the 64 distinct keys a run can have), so every distinct page reaches the
    origin exactly once and the origin count is the distinct server keys, as in the
    model. Cache-Control lifetimes are real seconds: the branch page's is 5 s, on the
    client, the edge and the server's fresh window alike, so the counts equal the
    model's when the chain's HTTP requests fit in that window (``live_server`` shows
    ``stale_served`` > 0 when they did not); the layer shares then match as well.
    Outside the origin count, the book page's server hit costs one primary-key
    lookup of its version (the key names it), which is not an origin call. The page
    tier (whole anonymous pages, namespace ``page``) answers most repeated book
    reads; a hit there is a server answer as well, shown on a row of its own in
    ``live_server`` (it serves many HTTP requests of several kinds, hence no count).
    Traffic of the installation on the same Redis during the run is counted too.
    """
    from course.labs.http_caching import signed_in_staff
    from course.labs.live import live_step, new_run_id
    from course.labs.live_http import (
        client_for,
        counters,
        counters_delta,
        counters_settled,
        daphnes,
        server_cold,
    )

    requests, seed = int_param(params, "requests"), int_param(params, "seed")
    chain = chain_stream(requests, int_param(params, "users"), seed)
    repeated = request_stream(requests, seed)
    chain_members = {ident for _, kind, ident in chain if kind == "member"}
    stream_members = {ident for kind, ident in repeated if kind == "member"}
    pages = _live_pages(max(chain_members | stream_members, default=0))
    with (
        daphnes(progress, ["on", "off"]) as (cached, uncached),
        client_for(cached) as anonymous,
        client_for(cached) as signed_in,
        signed_in_staff(signed_in, new_run_id()),
    ):
        live_step(progress, 0.08, "server cache made cold for the run's pages")
        server_cold(
            books=pages.books,
            branches=pages.branches,
            members=[pages.members[m - 1] for m in sorted(chain_members)],
        )
        before = counters(COUNTED_NAMESPACES)
        run = chain_live(
            chain,
            pages,
            anonymous=anonymous,
            signed_in=signed_in,
            client_capacity=int_param(params, "client_capacity"),
            edge_capacity=int_param(params, "edge_capacity"),
            progress=progress,
        )
        live_step(progress, 0.62, "chain: reading the server's own counters")
        chain_delta = counters_delta(
            counters_settled([cached], COUNTED_NAMESPACES, flush_path=pages.flush_path),
            before,
        )
        # The session is the same on both servers (one database, one secret).
        with (
            client_for(uncached) as plain,
            client_for(uncached, cookies=signed_in.cookies) as plain_signed_in,
        ):
            live_step(progress, 0.65, "repetition: every request to the origin")
            before = counters(COUNTED_NAMESPACES)
            repetition_s = repetition_live(
                repeated, pages, anonymous=plain, signed_in=plain_signed_in
            )
            repetition_delta = counters_delta(
                counters_settled(
                    [uncached], COUNTED_NAMESPACES, flush_path=pages.flush_path
                ),
                before,
            )
    origin = sum(chain_delta[n]["origin_calls"] for n in LIVE_NAMESPACES)
    sent = sum(run.sent.values())
    run.layers["server"] = sent - origin
    run.layers["origin"] = origin
    unique = len({pages.path(kind, ident) for kind, ident in repeated})
    queries = sum(repetition_delta[n]["origin_calls"] for n in LIVE_NAMESPACES)
    server_rows: list[list[Cell]] = []
    sent_by_namespace: dict[str, int | None] = {
        namespace: run.sent[kind] for kind, namespace in LIVE_KINDS.items()
    }
    for namespace in COUNTED_NAMESPACES:
        found = chain_delta[namespace]
        server_rows.append(
            [
                namespace,
                sent_by_namespace.get(namespace),
                found["hits"],
                found["misses"],
                found["origin_calls"],
                found["stale_served"],
            ]
        )
    return {
        "live_repetition": table(
            ["requests", "unique_keys", "origin_queries", "repeat_queries"],
            [[len(repeated), unique, queries, queries - unique]],
        ),
        "live_chain": table(
            ["layer", "requests", "share_pct"],
            [
                [
                    layer,
                    run.layers[layer],
                    js_fixed_number(_share(run.layers[layer], requests)),
                ]
                for layer in LAYERS
            ],
        ),
        "live_server": table(
            [
                "namespace",
                "http_requests",
                "hits",
                "misses",
                "origin_calls",
                "stale_served",
            ],
            server_rows,
        ),
        "live_timing": table(
            ["stream", "http_requests", "wall_s"],
            [
                ["chain", sent, round(run.wall_s, 2)],
                ["repetition", len(repeated), round(repetition_s, 2)],
            ],
        ),
    }


LAB = Lab(
    slug="cache-layers",
    title="Cache Layers",
    params=(
        Param(
            "requests",
            "int",
            600,
            "requests in each stream",
            minimum=0,
            maximum=200_000,
        ),
        Param(
            "users",
            "int",
            40,
            "distinct users in the chain stream",
            minimum=1,
            maximum=100_000,
        ),
        Param("seed", "int", 20250729, "generator seed", minimum=0, maximum=SEED_MAX),
        Param(
            "client_capacity",
            "int",
            4,
            "entries per user's client cache",
            minimum=1,
            maximum=100_000,
        ),
        Param(
            "edge_capacity",
            "int",
            10,
            "entries in the shared edge cache",
            minimum=1,
            maximum=100_000,
        ),
        Param(
            "server_capacity",
            "int",
            200,
            "entries in the server cache",
            minimum=1,
            maximum=100_000,
        ),
    ),
    model=model,
    live=live,
    charts=(
        Chart(
            table="chain",
            label="layer",
            values=("share_pct",),
            title="Share of requests answered by each layer",
            unit="%",
        ),
    ),
)
