"""The read-cache benchmark: daphne with the cache beside daphne without it.

Real ``daphne`` processes serve the course's data set
(``course.labs.harness.dataset``: the
Cache Layers library of 300 books, 200 members and 4000 loans) on the benchmark
database, so the figures stay comparable whatever the demo library holds; this
process talks to them over HTTP with httpx, as an anonymous visitor behind a TLS
proxy (``X-Forwarded-Proto: https``). Two instances run with ``LIBRARY_CACHE=on`` and
two with ``LIBRARY_CACHE=off`` (the kill switch of ``library.cache.store``), all at
once, so both sides share the machine.

1. Latency, interleaved ABAB: K sequential GETs of the catalogue pages
   (``/branches/1/books/?page=N``) and of book pages (``/books/N/``) on one cached and
   one uncached instance; p50/p99, and origin calls per request from the cache
   metrics (``metrics_read`` deltas of the ``list`` and ``book`` namespaces).
2. Stampede: 100 concurrent GETs of one never-requested book page, split over the two
   instances of a side; origin calls of the ``book`` namespace.
3. Conditional GET of a large list: requests/s of ``/branches/B/stock.json`` for a
   branch the benchmark adds with ``LARGE_BRANCH_BOOKS`` books (every book with its
   shelf count, about 200 KB), with a matching ``If-None-Match`` (304) and without
   (200), C requests in flight, one instance. Both are answered by the page tier;
   what the 304 saves is the body.

Origin calls are counted by the servers themselves: each buffers its counters and
flushes them at most a second later, on its next recorded event. Before reading the
counters the benchmark waits past that second and requests the branch page (the
``stock`` namespace, never measured) on each instance of the side, which flushes it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any, Final

from bench.common import (
    BENCH_REDIS_DB,
    BenchError,
    Children,
    choose_database,
    collect_static,
    flush_bench_redis,
    format_table,
    markdown_page,
    median,
    migrate,
    percentile,
    wait_until,
)
from config.processes import daphne_command, free_port

NAME = "caching"
TARGET_CATALOGUE_P50_RATIO: Final = 0.1  # cached p50 / uncached p50, at most
TARGET_BOOK_P50_RATIO: Final = 0.2
TARGET_CACHED_ORIGIN_PER_REQUEST: Final = 0.0
TARGET_STAMPEDE_ORIGIN_CALLS: Final = 1
TARGET_304_RATIO: Final = 1.5  # 304 requests/s / 200 requests/s, at least
BRANCH: Final = 1
LARGE_BRANCH_BOOKS: Final = 3000
# Behind a TLS-terminating proxy: the settings (DEBUG off) redirect plain HTTP.
HEADERS: Final = {"X-Forwarded-Proto": "https"}
METRICS_WINDOW_MIN: Final = 24 * 60
FLUSH_WAIT_S: Final = 1.2  # past metrics.FLUSH_INTERVAL_S
BOOK_SAMPLE: Final = 20  # book pages cycled through in the latency phase


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("caching")
    group.add_argument(
        "--http-requests", type=int, help="K GETs per latency round (default 400)"
    )
    group.add_argument(
        "--http-rounds", type=int, help="rounds per side and phase (default 3)"
    )
    group.add_argument(
        "--stampede", type=int, help="concurrent GETs on a cold key (default 100)"
    )
    group.add_argument(
        "--conditional-requests",
        type=int,
        help="requests per 304/200 throughput run (default 1000)",
    )
    group.add_argument(
        "--http-concurrency",
        type=int,
        help="requests in flight in the 304/200 runs (default 8)",
    )


@dataclass(frozen=True)
class Params:
    requests: int
    rounds: int
    stampede: int
    conditional_requests: int
    concurrency: int

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> Params:
        quick = options.quick
        params = cls(
            requests=options.http_requests or (60 if quick else 400),
            rounds=options.http_rounds or (1 if quick else 3),
            stampede=options.stampede or 100,
            conditional_requests=options.conditional_requests
            or (150 if quick else 1000),
            concurrency=options.http_concurrency or 8,
        )
        if min(asdict(params).values()) < 1:
            raise BenchError("the caching benchmark's counts must be at least 1")
        return params


@dataclass(frozen=True)
class Server:
    name: str
    port: int
    cache: str  # "on" or "off": LIBRARY_CACHE of the process

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# --- Set-up -------------------------------------------------------------------


def fresh_course_database(children: Children, options: argparse.Namespace) -> None:
    """Recreate and migrate the bench database, whatever ran before; load the
    course's data set into it."""
    from django.db import connections

    from course.labs.harness.dataset import dataset_load

    connections.close_all()
    choose_database(postgres=options.postgres).recreate()
    migrate(children)
    # The course's rows, not the demo library's: the demo library may change, and
    # the catalogue pages' sizes (and so the timings) would move with it.
    dataset_load()
    collect_static(children)
    flush_bench_redis()


def analyze_tables() -> None:
    """Give PostgreSQL the statistics of the rows just loaded (a no-op on SQLite).

    Autovacuum would gather them a minute later; until then the planner takes the
    fresh tables for empty ones, and the uncached side would be timed on plans a
    live database never runs.
    """
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def check_cache_redis() -> None:
    from library.cache.metrics import cache_redis

    db = cache_redis().connection_pool.connection_kwargs.get("db")
    if int(db or 0) != BENCH_REDIS_DB:
        raise BenchError(f"the cache uses Redis database {db}, not {BENCH_REDIS_DB}")


STARTUP_TIMEOUT_S: Final = 90
# One probe at a time, each given long enough to answer: a probe that gives up and
# asks again would pile slow requests on a server that is merely busy.
PROBE_TIMEOUT_S: Final = 10
LOG_TAIL_CHARS: Final = 4000


def start_server(children: Children, name: str, cache: str) -> Server:
    """Start one daphne of the project with LIBRARY_CACHE=cache (not waited for)."""
    server = Server(name=name, port=free_port(), cache=cache)
    children.start(
        name,
        [
            "env",
            f"LIBRARY_CACHE={cache}",
            "ALLOWED_HOSTS=127.0.0.1",
            *daphne_command(server.port),
        ],
    )
    return server


def wait_answering(children: Children, server: Server) -> None:
    """Wait for the server's home page to answer 200.

    A server that does not is reported with what the last probe got, its exit
    status (or that it is still running) and the end of its log.
    """
    import httpx

    last = ["no answer yet"]

    def answers() -> bool:
        try:
            response = httpx.get(
                server.base + "/", headers=HEADERS, timeout=PROBE_TIMEOUT_S
            )
        except httpx.HTTPError as error:
            last[0] = f"{type(error).__name__}: {error}"
            return False
        last[0] = f"HTTP {response.status_code}"
        return response.status_code == 200

    try:
        wait_until(
            answers,
            timeout=STARTUP_TIMEOUT_S,
            what=f"{server.name} to answer",
            children=children,
            interval=0.2,
        )
    except BenchError as error:
        process = children.processes.get(server.name)
        code = None if process is None else process.poll()
        status = "still running" if code is None else f"exited with {code}"
        log = children.log_text(server.name)[-LOG_TAIL_CHARS:] or "(empty)"
        raise BenchError(
            f"{error}; last probe: {last[0]}; {server.name} {status};"
            f" its log ends:\n{log}"
        ) from None


# --- Counting origin calls ----------------------------------------------------


def flush_servers(servers: list[Server]) -> None:
    """Make each server send its buffered counters to Redis (see the module doc)."""
    import httpx

    time.sleep(FLUSH_WAIT_S)
    for server in servers:
        response = httpx.get(
            f"{server.base}/branches/{BRANCH}/", headers=HEADERS, timeout=30
        )
        if response.status_code != 200:
            raise BenchError(f"{server.name}: branch page {response.status_code}")


def counters(namespace: str) -> dict[str, int]:
    """Return the namespace's counters (summed over the last day) from Redis."""
    from library.cache.metrics import metrics_read

    found: Any = metrics_read(METRICS_WINDOW_MIN).get(namespace) or {}
    fields = ("origin_calls", "hits", "misses", "singleflight_saved")
    return {field: int(found.get(field, 0)) for field in fields}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {field: after[field] - before[field] for field in after}


# --- 1. Latency ---------------------------------------------------------------


def _ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 50), 2),
        "p99_ms": round(percentile(values, 99), 2),
    }


def latency_round(
    server: Server, urls: list[str], count: int, namespace: str
) -> dict[str, Any]:
    """Time ``count`` sequential GETs (keep-alive) cycling through ``urls``."""
    import httpx

    with httpx.Client(base_url=server.base, headers=HEADERS, timeout=30) as client:
        if server.cache == "on":
            for url in urls:  # warm: every page stored before the clock runs
                client.get(url).raise_for_status()
        flush_servers([server])
        before = counters(namespace)
        timings = []
        for n in range(count):
            start = time.perf_counter()
            response = client.get(urls[n % len(urls)])
            timings.append((time.perf_counter() - start) * 1000)
            if response.status_code != 200:
                raise BenchError(
                    f"{server.name}: {urls[n % len(urls)]} answered"
                    f" {response.status_code}"
                )
    flush_servers([server])
    calls = delta(counters(namespace), before)
    return {
        "timings_ms": timings,
        "origin_calls": calls["origin_calls"],
        "origin_per_request": calls["origin_calls"] / count,
        "hits": calls["hits"],
    }


def latency(
    params: Params, cached: Server, uncached: Server, book_ids: list[int]
) -> dict[str, Any]:
    from library.models import Book
    from library.selectors import BOOKS_PER_PAGE

    in_branch = Book.objects.filter(branch_id=BRANCH).count()
    pages = max(1, -(-in_branch // BOOKS_PER_PAGE))
    kinds = {
        "catalogue": (
            "list",
            [f"/branches/{BRANCH}/books/?page={n}" for n in range(1, pages + 1)],
        ),
        "book": ("book", [f"/books/{pk}/" for pk in book_ids]),
    }
    report: dict[str, Any] = {}
    for kind, (namespace, urls) in kinds.items():
        rounds: dict[str, list[dict[str, Any]]] = {"cached": [], "uncached": []}
        for n in range(1, params.rounds + 1):
            for side, server in (("cached", cached), ("uncached", uncached)):
                print(
                    f"  latency {kind} round {n}/{params.rounds}: {side} ...",
                    flush=True,
                )
                rounds[side].append(
                    latency_round(server, urls, params.requests, namespace)
                )
        sides = {}
        for side, runs in rounds.items():
            pooled = [t for run in runs for t in run["timings_ms"]]
            calls = sum(run["origin_calls"] for run in runs)
            sides[side] = {
                **_ms(pooled),
                "requests": len(pooled),
                "origin_calls": calls,
                "origin_per_request": round(calls / len(pooled), 3),
                "round_p50_ms": [
                    round(percentile(run["timings_ms"], 50), 2) for run in runs
                ],
            }
        ratio = sides["cached"]["p50_ms"] / sides["uncached"]["p50_ms"]
        report[kind] = {
            "urls": urls,
            "namespace": namespace,
            **sides,
            "p50_ratio_cached_over_uncached": round(ratio, 3),
            "pair_p50_ratios": [
                round(a / b, 3)
                for a, b in zip(
                    sides["cached"]["round_p50_ms"],
                    sides["uncached"]["round_p50_ms"],
                    strict=True,
                )
            ],
        }
    return report


# --- 2. Stampede --------------------------------------------------------------


async def _burst(urls: list[str]) -> tuple[list[int], list[float], float]:
    import httpx

    limits = httpx.Limits(max_connections=len(urls), max_keepalive_connections=0)
    async with httpx.AsyncClient(headers=HEADERS, timeout=60, limits=limits) as client:

        async def one(url: str) -> tuple[int, float]:
            start = time.perf_counter()
            response = await client.get(url)
            return response.status_code, (time.perf_counter() - start) * 1000

        started = time.perf_counter()
        answers = await asyncio.gather(*(one(url) for url in urls))
        wall_ms = (time.perf_counter() - started) * 1000
    return [a[0] for a in answers], [a[1] for a in answers], wall_ms


def drop_book_entries(book_id: int) -> int:
    """Delete every Redis entry of one book page (its key names the version)."""
    from library.cache.metrics import cache_redis

    client = cache_redis()
    doomed = list(client.scan_iter(match=f"book:*:id={book_id}&*", count=500))
    if doomed:
        client.delete(*doomed)
    return len(doomed)


def stampede(
    params: Params, sides: dict[str, list[Server]], cold_books: list[int]
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for n in range(1, params.rounds + 1):
        for side, servers in sides.items():
            # A book no request has touched: cold in Redis and in every local tier.
            book_id = cold_books.pop()
            dropped = drop_book_entries(book_id)
            print(
                f"  stampede round {n}/{params.rounds}: {side}, book {book_id},"
                f" {params.stampede} concurrent GETs over {len(servers)} instances",
                flush=True,
            )
            flush_servers(servers)
            before = counters("book")
            urls = [
                f"{servers[i % len(servers)].base}/books/{book_id}/"
                for i in range(params.stampede)
            ]
            statuses, timings, wall_ms = asyncio.run(_burst(urls))
            flush_servers(servers)
            calls = delta(counters("book"), before)
            bad = [s for s in statuses if s != 200]
            if bad:
                raise BenchError(f"stampede on {side}: {len(bad)} answers not 200")
            runs[side].append(
                {
                    "book_id": book_id,
                    "entries_dropped_first": dropped,
                    "requests": len(statuses),
                    "origin_calls": calls["origin_calls"],
                    "singleflight_saved": calls["singleflight_saved"],
                    "burst_wall_ms": round(wall_ms, 1),
                    **_ms(timings),
                }
            )
    report: dict[str, Any] = {}
    for side, side_runs in runs.items():
        report[side] = {
            "origin_calls_per_round": [r["origin_calls"] for r in side_runs],
            "max_origin_calls": max(r["origin_calls"] for r in side_runs),
            "runs": side_runs,
        }
    return report


# --- 3. 304 vs 200 ------------------------------------------------------------


async def _throughput(
    url: str, count: int, concurrency: int, etag: str | None
) -> dict[str, Any]:
    import httpx

    headers = dict(HEADERS)
    if etag is not None:
        headers["If-None-Match"] = etag
    statuses: dict[int, int] = {}
    body_bytes = 0
    remaining = count
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as client:

        async def worker() -> None:
            nonlocal remaining, body_bytes
            while remaining > 0:
                remaining -= 1
                response = await client.get(url)
                statuses[response.status_code] = (
                    statuses.get(response.status_code, 0) + 1
                )
                body_bytes += len(response.content)

        await client.get(url)  # open the connections' first one outside the clock
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall_s = time.perf_counter() - started
    return {
        "requests": count,
        "wall_s": round(wall_s, 3),
        "requests_per_s": round(count / wall_s, 1),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "body_bytes_per_response": round(body_bytes / count),
    }


def create_large_branch() -> int:
    """Add a branch holding ``LARGE_BRANCH_BOOKS`` books; return its id."""
    from library.models import Book, Branch

    branch = Branch.objects.create(name="Bench stacks", city="Bench")
    Book.objects.bulk_create(
        [
            Book(
                title=f"Stack volume {n:05}",
                author=f"Author {n % 97}",
                branch=branch,
                on_shelf=n % 5,
            )
            for n in range(LARGE_BRANCH_BOOKS)
        ],
        batch_size=500,
    )
    return branch.pk


def conditional(params: Params, server: Server, branch_id: int) -> dict[str, Any]:
    import httpx

    url = f"{server.base}/branches/{branch_id}/stock.json"
    runs: dict[str, list[dict[str, Any]]] = {"200": [], "304": []}
    for n in range(1, params.rounds + 1):
        # Warm (the entry may have aged out) and take the current tag.
        first = httpx.get(url, headers=HEADERS, timeout=30)
        first.raise_for_status()
        etag = first.headers["ETag"]
        for mode in ("200", "304"):
            print(f"  conditional round {n}/{params.rounds}: {mode} ...", flush=True)
            run_ = asyncio.run(
                _throughput(
                    url,
                    params.conditional_requests,
                    params.concurrency,
                    etag if mode == "304" else None,
                )
            )
            if run_["statuses"] != {mode: params.conditional_requests}:
                raise BenchError(f"{mode} run answered {run_['statuses']}")
            runs[mode].append(run_)
    medians = {
        mode: median([r["requests_per_s"] for r in mode_runs])
        for mode, mode_runs in runs.items()
    }
    return {
        "url": url.removeprefix(server.base),
        "page_bytes": len(first.content),
        "median_requests_per_s": medians,
        "ratio_304_over_200": round(medians["304"] / medians["200"], 2),
        "pair_ratios": [
            round(a["requests_per_s"] / b["requests_per_s"], 2)
            for a, b in zip(runs["304"], runs["200"], strict=True)
        ],
        "runs": runs,
    }


# --- 4. Lesson page -----------------------------------------------------------


LESSON_SLUG: Final = "cache-layers"
TARGET_LESSON_P50_MS: Final = 20.0


def lesson_round(server: Server, url: str, count: int, encoding: str) -> dict[str, Any]:
    """Time ``count`` sequential anonymous GETs of ``url``; count the bytes sent."""
    import httpx

    headers = {**HEADERS, "Accept-Encoding": encoding}
    # No cookie jar: every request is a first visit, as a crawler or a new
    # visitor's is (the CSRF cookie the page sets would not change the variant).
    with httpx.Client(base_url=server.base, headers=headers, timeout=30) as client:
        client.get(url).raise_for_status()  # warm: stored (or not) before the clock
        timings, wire, body = [], 0, 0
        for _ in range(count):
            client.cookies.clear()
            start = time.perf_counter()
            response = client.get(url)
            timings.append((time.perf_counter() - start) * 1000)
            if response.status_code != 200:
                raise BenchError(
                    f"{server.name}: {url} answered {response.status_code}"
                )
            wire += response.num_bytes_downloaded
            body += len(response.content)
            sent_as = response.headers.get("content-encoding", "identity")
    return {
        "timings_ms": timings,
        "wire_bytes": round(wire / count),
        "page_bytes": round(body / count),
        "content_encoding": sent_as,
    }


def lesson_pages(params: Params, cached: Server, uncached: Server) -> dict[str, Any]:
    """The anonymous lesson page, cached and not, identity and gzip; a static file
    through the same daphne (WhiteNoise) as the floor."""
    from django.templatetags.static import static

    lesson = f"/course/{LESSON_SLUG}/"
    cases = {
        "lesson, cached": (cached, lesson, "identity"),
        "lesson, cached, gzip": (cached, lesson, "gzip"),
        "lesson, uncached": (uncached, lesson, "identity"),
        "static file (WhiteNoise)": (cached, static("css/lesson.css"), "identity"),
    }
    runs: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for n in range(1, params.rounds + 1):
        for case, (server, url, encoding) in cases.items():
            print(f"  lesson round {n}/{params.rounds}: {case} ...", flush=True)
            runs[case].append(lesson_round(server, url, params.requests, encoding))
    report: dict[str, Any] = {"slug": LESSON_SLUG}
    for case, case_runs in runs.items():
        pooled = [t for run in case_runs for t in run["timings_ms"]]
        report[case] = {
            "url": cases[case][1],
            **_ms(pooled),
            "requests": len(pooled),
            "wire_bytes": case_runs[0]["wire_bytes"],
            "page_bytes": case_runs[0]["page_bytes"],
            "content_encoding": case_runs[0]["content_encoding"],
            "round_p50_ms": [
                round(percentile(run["timings_ms"], 50), 2) for run in case_runs
            ],
        }
    base = report["lesson, uncached"]["p50_ms"]
    report["p50_ratio_cached_over_uncached"] = round(
        report["lesson, cached"]["p50_ms"] / base, 3
    )
    return report


# --- Run ----------------------------------------------------------------------


def run(children: Children, options: argparse.Namespace) -> dict[str, Any]:
    params = Params.from_options(options)
    print("  fresh database, the course's data set ...", flush=True)
    fresh_course_database(children, options)
    check_cache_redis()
    from library.models import Book

    ids = list(Book.objects.order_by("id").values_list("id", flat=True))
    if len(ids) < BOOK_SAMPLE + 2 * params.rounds:
        raise BenchError(f"the course's data set has only {len(ids)} books")
    book_ids = ids[:BOOK_SAMPLE]
    cold_books = ids[BOOK_SAMPLE:]
    large_branch = create_large_branch()
    analyze_tables()
    print("  starting 2 daphne with LIBRARY_CACHE=on, 2 with off ...", flush=True)
    servers = {
        "cached": [start_server(children, f"daphne-on-{n}", "on") for n in (1, 2)],
        "uncached": [start_server(children, f"daphne-off-{n}", "off") for n in (1, 2)],
    }
    for side in servers.values():
        for server in side:
            wait_answering(children, server)
    try:
        lat = latency(params, servers["cached"][0], servers["uncached"][0], book_ids)
        storm = stampede(params, servers, cold_books)
        cond = conditional(params, servers["cached"][0], large_branch)
        lessons = lesson_pages(params, servers["cached"][0], servers["uncached"][0])
    finally:
        children.check_alive()
        for side in servers.values():
            for server in side:
                children.stop(server.name)
    catalogue_ratio = lat["catalogue"]["p50_ratio_cached_over_uncached"]
    book_ratio = lat["book"]["p50_ratio_cached_over_uncached"]
    lesson_p50 = max(
        lessons["lesson, cached"]["p50_ms"], lessons["lesson, cached, gzip"]["p50_ms"]
    )
    cached_origin = max(
        lat["catalogue"]["cached"]["origin_per_request"],
        lat["book"]["cached"]["origin_per_request"],
    )
    targets = {
        "catalogue_p50_ratio": {
            "target": f"<= {TARGET_CATALOGUE_P50_RATIO}",
            "measured": catalogue_ratio,
            "met": catalogue_ratio <= TARGET_CATALOGUE_P50_RATIO,
        },
        "book_p50_ratio": {
            "target": f"<= {TARGET_BOOK_P50_RATIO}",
            "measured": book_ratio,
            "met": book_ratio <= TARGET_BOOK_P50_RATIO,
        },
        "cached_origin_calls_per_request": {
            "target": f"== {TARGET_CACHED_ORIGIN_PER_REQUEST:g}",
            "measured": cached_origin,
            "met": cached_origin == TARGET_CACHED_ORIGIN_PER_REQUEST,
        },
        "stampede_origin_calls_cached": {
            "target": f"== {TARGET_STAMPEDE_ORIGIN_CALLS}",
            "measured": storm["cached"]["origin_calls_per_round"],
            "met": all(
                c == TARGET_STAMPEDE_ORIGIN_CALLS
                for c in storm["cached"]["origin_calls_per_round"]
            ),
        },
        "conditional_304_over_200": {
            "target": f">= {TARGET_304_RATIO}",
            "measured": cond["ratio_304_over_200"],
            "met": cond["ratio_304_over_200"] >= TARGET_304_RATIO,
        },
        "lesson_page_p50_ms": {
            "target": f"<= {TARGET_LESSON_P50_MS:g}",
            "measured": lesson_p50,
            "met": lesson_p50 <= TARGET_LESSON_P50_MS,
        },
    }
    result = {
        "params": asdict(params),
        "servers": {
            side: [asdict(s) for s in side_servers]
            for side, side_servers in servers.items()
        },
        "latency": lat,
        "stampede": storm,
        "conditional": cond,
        "lessons": lessons,
        "targets": targets,
    }
    print()
    print(text_report(result))
    return result


def text_report(result: dict[str, Any]) -> str:
    p = result["params"]
    lat = result["latency"]
    rows = []
    for kind in ("catalogue", "book"):
        for side in ("cached", "uncached"):
            s = lat[kind][side]
            rows.append(
                [
                    f"{kind}, {side}",
                    s["p50_ms"],
                    s["p99_ms"],
                    s["requests"],
                    s["origin_per_request"],
                ]
            )
    storm = result["stampede"]
    storm_rows = [
        [
            side,
            ", ".join(map(str, storm[side]["origin_calls_per_round"])),
            ", ".join(str(r["singleflight_saved"]) for r in storm[side]["runs"]),
            median([r["p50_ms"] for r in storm[side]["runs"]]),
            median([r["burst_wall_ms"] for r in storm[side]["runs"]]),
        ]
        for side in ("cached", "uncached")
    ]
    cond = result["conditional"]
    cond_rows = [
        [
            f"{mode} ({'If-None-Match matches' if mode == '304' else 'no validator'})",
            cond["median_requests_per_s"][mode],
            cond["runs"][mode][0]["body_bytes_per_response"],
        ]
        for mode in ("200", "304")
    ]
    les = result["lessons"]
    lesson_rows = [
        [
            case,
            les[case]["p50_ms"],
            les[case]["p99_ms"],
            les[case]["requests"],
            les[case]["content_encoding"],
            les[case]["wire_bytes"],
            les[case]["page_bytes"],
        ]
        for case in (
            "lesson, cached",
            "lesson, cached, gzip",
            "lesson, uncached",
            "static file (WhiteNoise)",
        )
    ]
    target_rows = [
        [name, t["target"], str(t["measured"]), "met" if t["met"] else "NOT met"]
        for name, t in result["targets"].items()
    ]
    return "\n".join(
        [
            f"1. Latency: {p['requests']} sequential anonymous GETs per round,"
            f" {p['rounds']} interleaved rounds per side (cache warmed first)",
            format_table(
                ["page, side", "p50 ms", "p99 ms", "requests", "origin/request"], rows
            ),
            "p50 cached/uncached: catalogue"
            f" {lat['catalogue']['p50_ratio_cached_over_uncached']:.3f}"
            f" (per round {lat['catalogue']['pair_p50_ratios']}),"
            f" book {lat['book']['p50_ratio_cached_over_uncached']:.3f}"
            f" (per round {lat['book']['pair_p50_ratios']})",
            "",
            f"2. Stampede: {p['stampede']} concurrent GETs of a cold book page over"
            " two daphne instances, per round",
            format_table(
                ["side", "origin calls", "single-flight saved", "p50 ms", "burst ms"],
                storm_rows,
            ),
            "",
            f"3. Conditional GET of {cond['url']} ({cond['page_bytes']} bytes),"
            f" {p['conditional_requests']} requests, {p['concurrency']} in flight,"
            " one cached instance",
            format_table(["path", "requests/s", "body bytes"], cond_rows),
            f"ratio 304/200: {cond['ratio_304_over_200']:.2f}x"
            f" (per round {cond['pair_ratios']})",
            "",
            f"4. Lesson page /course/{les['slug']}/, anonymous, no cookies:"
            f" {p['requests']} sequential GETs per round, {p['rounds']} rounds;"
            " the static file is the floor of a request through the same daphne",
            format_table(
                [
                    "case",
                    "p50 ms",
                    "p99 ms",
                    "requests",
                    "sent as",
                    "bytes sent",
                    "page bytes",
                ],
                lesson_rows,
            ),
            "p50 cached/uncached (identity):"
            f" {les['p50_ratio_cached_over_uncached']:.3f}",
            "",
            "Targets (reported, never asserted)",
            format_table(["target", "wanted", "measured", ""], target_rows),
        ]
    )


def markdown_report(document: dict[str, Any]) -> str:
    return markdown_page(
        document,
        title="Read-cache benchmark (caching)",
        report=text_report(document["results"][NAME]),
        database_note=" (the course's data set)",
        note="Both sides ran at the same time on the same machine: two daphne with"
        " `LIBRARY_CACHE=on`, two with `LIBRARY_CACHE=off`. Origin calls are the"
        " servers' own cache metrics (`origin_calls`, `metrics_read` deltas);"
        " see bench/README.md.",
    )
