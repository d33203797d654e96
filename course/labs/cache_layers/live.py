"""The live part of the cache-layers lab: real HTTP through a client cache and an edge
to a real daphne, origin calls counted by the server cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from course.labs.cache_layers.http_cache import HttpCache, header_seconds
from course.labs.cache_layers.model import (
    BOOKS,
    BRANCHES,
    LAYERS,
    chain_stream,
    request_stream,
    share_pct,
)
from course.labs.cache_layers.params import CacheLayersParams
from course.labs.harness.base import (
    Cell,
    LabError,
    LivePart,
    Progress,
    Tables,
    table,
)
from course.labs.harness.jsnum import js_fixed_number
from course.labs.harness.live import live_step, new_run_id
from course.labs.harness.live_http import (
    Counters,
    client_for,
    counters,
    counters_delta,
    counters_settled,
    daphnes,
    server_cold,
    signed_in_staff,
)
from library.models import Book, Branch, Member

# --- live part: real HTTP through a client cache and an edge to a real daphne -------

LIVE_KINDS = {"book": "book", "branch": "stock", "member": "history"}  # -> namespace
LIVE_NAMESPACES = tuple(LIVE_KINDS.values())
# Whole anonymous pages (``library.cache.pages``): a hit there is the server layer
# too, and the tier makes no origin call of its own (a miss runs the view).
PAGE_NAMESPACE = "page"
COUNTED_NAMESPACES = (*LIVE_NAMESPACES, PAGE_NAMESPACE)
# The branch page's fresh window in the lab's servers: longer than any run, so the
# counts do not depend on the machine's speed (see ``measure``).
LIVE_STOCK_FRESH_S = 600
LIVE_ENV = {"LIBRARY_CACHE_STOCK_FRESH_S": str(LIVE_STOCK_FRESH_S)}


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


def live_pages(members_needed: int) -> LivePages:

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
        produced = arrived - (header_seconds(response.headers.get("age")) or 0.0)
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


def live_check(params: CacheLayersParams) -> str | None:
    """Refuse a chain without the server cache: the live server always caches."""
    if params.server_capacity == 0:
        # The live server cache is Redis, and the application cannot switch it off
        # for one tier of the chain while the other daphne still reads through it.
        return (
            "server_capacity: 0 (server cache off) runs in the model only; the live "
            "server always caches"
        )
    return None


@dataclass(frozen=True)
class Measurement:
    """What the two streams did on the real servers."""

    chain: ChainRun  # answered by the client and edge caches, sent over HTTP
    chain_counts: Counters  # the cached server's own counters, per namespace
    repetition_requests: int
    repetition_pages: int  # distinct real pages the repetition stream read
    repetition_counts: Counters  # the uncached server's counters, per namespace
    repetition_s: float


def measure(params: CacheLayersParams, progress: Progress) -> Measurement:
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
    model. Cache-Control lifetimes are real seconds, and the model has no clock: an
    installation's branch page is fresh for 5 s (on the client, the edge and the
    server's fresh window alike), which a slow machine's chain can outlast. The lab's
    daphnes therefore run with ``LIBRARY_CACHE_STOCK_FRESH_S`` =
    ``LIVE_STOCK_FRESH_S`` (the one setting behind all three), so no entry ages
    during a run and the layer shares match the model's as well (``live_server``
    would show ``stale_served`` > 0 if one did).
    Outside the origin count, the book page's server hit costs one primary-key
    lookup of its version (the key names it), which is not an origin call. The page
    tier (whole anonymous pages, namespace ``page``) answers most repeated book
    reads; a hit there is a server answer as well, shown on a row of its own in
    ``live_server`` (it serves many HTTP requests of several kinds, hence no count).
    Traffic of the installation on the same Redis during the run is counted too.
    """

    chain = chain_stream(params.requests, params.users, params.seed)
    repeated = request_stream(params.requests, params.seed)
    chain_members = {ident for _, kind, ident in chain if kind == "member"}
    stream_members = {ident for kind, ident in repeated if kind == "member"}
    pages = live_pages(max(chain_members | stream_members, default=0))
    with (
        daphnes(progress, ["on", "off"], env=LIVE_ENV) as (cached, uncached),
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
        try:
            run = chain_live(
                chain,
                pages,
                anonymous=anonymous,
                signed_in=signed_in,
                client_capacity=params.client_capacity,
                edge_capacity=params.edge_capacity,
                progress=progress,
            )
        finally:
            # Stored fresh for LIVE_STOCK_FRESH_S: gone, so that the installation's
            # own lifetime applies again from its next read.
            server_cold(branches=pages.branches)
        live_step(progress, 0.62, "chain: reading the server's own counters")
        chain_counts = counters_delta(
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
            repetition_counts = counters_delta(
                counters_settled(
                    [uncached], COUNTED_NAMESPACES, flush_path=pages.flush_path
                ),
                before,
            )
    return Measurement(
        chain=run,
        chain_counts=chain_counts,
        repetition_requests=len(repeated),
        repetition_pages=len({pages.path(kind, ident) for kind, ident in repeated}),
        repetition_counts=repetition_counts,
        repetition_s=repetition_s,
    )


def tables(params: CacheLayersParams, measured: Measurement) -> Tables:
    """Credit each request to its layer; the origin is the calls the server counted."""
    run, chain_counts = measured.chain, measured.chain_counts
    origin = sum(chain_counts[n]["origin_calls"] for n in LIVE_NAMESPACES)
    sent = sum(run.sent.values())
    layers = {**run.layers, "server": sent - origin, "origin": origin}
    unique = measured.repetition_pages
    queries = sum(
        measured.repetition_counts[n]["origin_calls"] for n in LIVE_NAMESPACES
    )
    sent_by_namespace: dict[str, int | None] = {
        namespace: run.sent[kind] for kind, namespace in LIVE_KINDS.items()
    }
    server_rows: list[list[Cell]] = [
        [
            namespace,
            sent_by_namespace.get(namespace),
            chain_counts[namespace]["hits"],
            chain_counts[namespace]["misses"],
            chain_counts[namespace]["origin_calls"],
            chain_counts[namespace]["stale_served"],
        ]
        for namespace in COUNTED_NAMESPACES
    ]
    return {
        "live_repetition": table(
            ["requests", "unique_keys", "origin_queries", "repeat_queries"],
            [[measured.repetition_requests, unique, queries, queries - unique]],
        ),
        "live_chain": table(
            ["layer", "requests", "share_pct"],
            [
                [
                    layer,
                    layers[layer],
                    js_fixed_number(share_pct(layers[layer], params.requests)),
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
                [
                    "repetition",
                    measured.repetition_requests,
                    round(measured.repetition_s, 2),
                ],
            ],
        ),
    }


LIVE = LivePart(check=live_check, measure=measure, tables=tables)
