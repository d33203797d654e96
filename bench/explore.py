"""The explore benchmark: a class moves a lesson's sliders at once.

The system runs as ``make run`` runs its web side: one daphne process (DEBUG off,
collected static files), with a model cache of its own (``LIBRARY_VAR_DIR`` in a
temporary folder, so no parameter set is kept from an earlier run). Per lesson:

1. **Twenty learners** (``learners``), anonymous httpx clients in this process (one
   asyncio loop), each drag a slider as the lesson page does: a drag is six
   successive positions ``move_gap_s`` apart from a random starting point, with
   another parameter at a random value of its own (so most forward moves are sets
   nobody asked for yet), a pause to read, then the drag back over the same values
   (sets the server keeps), a pause, and again, for ``duration_s``. Each request
   is ``GET /course/<slug>/model.json`` with the changed parameters and ``since``
   (the previous answer's key), as ``static/js/explore.js`` sends it. The clock runs
   from sending the request to the parsed JSON; the answer's ``X-Model-Source``
   says whether the model ran for it (uncached: ``run``) or the set was kept
   (cached: ``memory`` or ``disk``).
2. **One real browser among them**: headless Chromium (Debian's) on the lesson page
   drags the same slider with the keyboard, a move every ``browser_gap_s`` (past
   the page's 150 ms debounce, so each move is one request). The page itself
   measures each redraw (``data-fetch-ms``: request sent → JSON parsed;
   ``data-render-ms``: → charts and tables built and painted, two animation
   frames later).

"Parameter change → redrawn chart" is reported two ways: the HTTP round trip of the
twenty clients plus the browser's redraw (p95 + p95, a bound), and the browser's own
fetch + redraw per move. Neither includes the debounce (150 ms of quiet the page
waits for before it asks: the learner is still moving). The target (issue #28):
p95 ≤ 150 ms, for cached and uncached sets, on this machine.

The per-address limit of new sets (``LAB_EXPLORE_RUNS_PER_MINUTE``) is raised for
the daphne: the twenty learners share one address here, as a class behind one router
would not (each signed-in learner counts alone).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.common import (
    BenchError,
    Children,
    CpuMeter,
    collect_static,
    format_table,
    markdown_page,
    percentile,
    wait_until,
)
from config.processes import free_port

NAME = "explore"
TARGET_P95_MS: Final = 150.0
CHROMIUM: Final = "/usr/bin/chromium"
# Per lesson: the slider dragged and another parameter set at random per drag.
DRAGS: Final = {
    "cache-layers": ("edge_capacity", "server_capacity"),
    "message-queues": ("production", "consumption_rate"),
    "hot-key-and-stampede-effect": ("jitter", "lifetime"),
}
DRAG_LENGTH: Final = 6
# Where the model runs for a new set (LAB_EXPLORE_PROCESSES): the production
# setting, a worker process beside the web process, and the anchor, in the web
# process itself (one at a time).
MODES: Final = {"worker process": "1", "web process": "0"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("explore")
    group.add_argument("--explore-learners", type=int, help="learners (default 20)")
    group.add_argument(
        "--explore-lessons",
        help="comma-separated lessons (default cache-layers,message-queues)",
    )
    group.add_argument(
        "--explore-seconds", type=float, help="seconds per lesson (default 40)"
    )


@dataclass(frozen=True)
class Params:
    learners: int
    lessons: tuple[str, ...]
    duration_s: float
    move_gap_s: float = 0.25
    read_pause_s: tuple[float, float] = (1.0, 2.5)
    browser_gap_s: float = 0.4
    seed: int = 28

    @classmethod
    def from_options(cls, options: argparse.Namespace) -> Params:
        lessons = options.explore_lessons or "cache-layers,message-queues"
        return cls(
            learners=options.explore_learners or 20,
            lessons=tuple(s.strip() for s in lessons.split(",") if s.strip()),
            duration_s=options.explore_seconds or (10.0 if options.quick else 40.0),
        )


# --- the site ---------------------------------------------------------------------


def start_site(children: Children, var_dir: Path, processes: str) -> str:
    """Start one daphne, as ``make run`` does, with a model cache of its own and
    its model runs in ``processes`` worker processes (0: in the web process)."""
    from django.conf import settings

    port = free_port()
    children.environment.update(
        {
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "SECURE_COOKIES": "false",
            "SECURE_HSTS_SECONDS": "0",
            "LIBRARY_VAR_DIR": str(var_dir),
            # The same Redis server as this process (an embedded one lives in var/).
            "REDIS_URL": settings.REDIS_CHOICE.url,
            "LIBRARY_LAB_EXPLORE_RUNS_PER_MINUTE": "1000000",
            "LIBRARY_LAB_EXPLORE_PROCESSES": processes,
        }
    )
    children.start(
        "explore-web",
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "config.asgi:application",
        ],
    )
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(base), timeout=90, what="daphne", children=children)
    return base


def _answers(base: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{base}/course/", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


# --- what a drag asks -----------------------------------------------------------


@dataclass(frozen=True)
class Drag:
    """The slider a learner drags and the parameter set at random per drag."""

    slider: str
    grid: tuple[str, ...]
    context: str
    context_grid: tuple[str, ...]
    defaults: dict[str, str]


def drag_of(lesson: str) -> Drag:
    from course.explore import controls_for
    from course.labs.registry import lab_get

    lab = lab_get(lesson)
    sliders = {c.name: c for c in controls_for(lab) if c.kind == "slider"}
    if len(sliders) < 2:
        raise BenchError(f"{lesson} has fewer than two sliders to explore")
    slider, context = DRAGS.get(lesson, tuple(sliders)[:2])

    def grid(name: str) -> tuple[str, ...]:
        control = sliders[name]
        assert control.low is not None
        assert control.high is not None
        count = round((control.high - control.low) / control.step) + 1
        values = (control.low + k * control.step for k in range(count))
        low = control.minimum if control.minimum is not None else control.low
        return tuple(
            dict.fromkeys(
                _text(max(value, low), integer=control.integer) for value in values
            )
        )

    return Drag(
        slider=slider,
        grid=grid(slider),
        context=context,
        context_grid=grid(context),
        defaults={c.name: c.default for c in controls_for(lab)},
    )


def _text(value: float, *, integer: bool) -> str:
    return str(round(value)) if integer else f"{value:g}"


# --- the learners ------------------------------------------------------------------


@dataclass
class Sample:
    ms: float
    source: str
    server_ms: float  # the view's own time for the tables (Server-Timing)


@dataclass
class Learners:
    samples: list[Sample] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


async def learner(
    base: str, lesson: str, drag: Drag, n: int, params: Params, out: Learners
) -> None:
    import httpx

    rng = random.Random(params.seed * 1000 + n)
    url = f"/course/{lesson}/model.json"
    since = ""
    end = time.monotonic() + params.duration_s
    async with httpx.AsyncClient(base_url=base, timeout=60.0) as client:
        await client.get(url)  # the page's first answer (defaults), not measured
        # Start spread over a second, as a class does not press in step.
        await asyncio.sleep(rng.random())
        while time.monotonic() < end:
            context = rng.choice(drag.context_grid)
            start = rng.randrange(max(1, len(drag.grid) - DRAG_LENGTH))
            values = list(drag.grid[start : start + DRAG_LENGTH])
            for path in (values, values[-2::-1]):  # forward, then back
                for value in path:
                    query = {drag.context: context, drag.slider: value}
                    since = await _ask(client, url, query, since, out)
                    await asyncio.sleep(params.move_gap_s)
                await asyncio.sleep(rng.uniform(*params.read_pause_s))


async def _ask(
    client: Any, url: str, query: dict[str, str], since: str, out: Learners
) -> str:
    import httpx

    sent = dict(query)
    if since:
        sent["since"] = since
    began = time.perf_counter()
    try:
        response = await client.get(url, params=sent)
        body = response.json()
    except (httpx.HTTPError, ValueError) as error:
        key = type(error).__name__
        out.errors[key] = out.errors.get(key, 0) + 1
        return since
    ms = (time.perf_counter() - began) * 1000
    if response.status_code != 200:
        key = str(response.status_code)
        out.errors[key] = out.errors.get(key, 0) + 1
        return since
    timing = response.headers.get("Server-Timing", "").partition("dur=")[2]
    out.samples.append(
        Sample(ms, response.headers.get("X-Model-Source", ""), float(timing or 0))
    )
    return str(body.get("key", since))


async def floor_probe(base: str, lesson: str, params: Params, out: list[float]) -> None:
    """The same view's cheapest answer, five times a second: a 304 for the defaults.

    It parses the parameters and compares the ETag, and sends no tables: what any
    answer costs on this machine, under this load, before the model's tables.
    """
    import httpx

    url = f"/course/{lesson}/model.json"
    end = time.monotonic() + params.duration_s
    async with httpx.AsyncClient(base_url=base, timeout=60.0) as client:
        etag = (await client.get(url)).headers["ETag"]
        while time.monotonic() < end:
            began = time.perf_counter()
            response = await client.get(url, headers={"If-None-Match": etag})
            if response.status_code == 304:
                out.append((time.perf_counter() - began) * 1000)
            await asyncio.sleep(0.2)


# --- the browser among them ----------------------------------------------------------


@dataclass
class Redraw:
    fetch_ms: float
    render_ms: float
    source: str


async def browser_learner(
    base: str, lesson: str, drag: Drag, params: Params, out: list[Redraw]
) -> str:
    """Drag the lesson's slider in headless Chromium; return "" or why it could not."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is not installed"
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        return "playwright is not installed"
    end = time.monotonic() + params.duration_s
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await page.goto(f"{base}/course/{lesson}/?reveal=1")
        await _drawn(page, 0)
        slider = f"#id_{drag.slider}_slider"
        rng = random.Random(params.seed)
        while time.monotonic() < end:
            # A drag from a point of its own, with the other parameter at random:
            # two changes typed into their fields, then the slider from the keyboard.
            start = rng.randrange(1, max(2, len(drag.grid) - DRAG_LENGTH))
            typed = (
                (f"#id_{drag.slider}", drag.grid[start]),
                (f"#id_{drag.context}", rng.choice(drag.context_grid)),
            )
            for field_, value in typed:
                await _move(page, out, lambda f=field_, v=value: page.fill(f, v))
            await page.focus(slider)
            for key in ("ArrowRight",) * DRAG_LENGTH + ("ArrowLeft",) * DRAG_LENGTH:
                await _move(page, out, lambda k=key: page.keyboard.press(k))
                await asyncio.sleep(params.browser_gap_s)
        await browser.close()
    return ""


async def _move(page: Any, out: list[Redraw], action: Any) -> None:
    """Make one change on the page and keep its redraw's measures."""
    before = await _draws(page)
    await action()
    if await _drawn(page, before):
        out.append(
            Redraw(
                float(await _data(page, "fetch-ms")),
                float(await _data(page, "render-ms")),
                await _data(page, "source"),
            )
        )


async def _data(page: Any, name: str) -> str:
    return str(await page.get_attribute("[data-explore]", f"data-{name}") or "")


async def _draws(page: Any) -> int:
    return int(await _data(page, "draws") or 0)


async def _drawn(page: Any, before: int) -> bool:
    """Wait for the next redraw; False when the move asked nothing (an end)."""
    from playwright.async_api import TimeoutError as NoRedraw

    try:
        await page.wait_for_function(
            "n => Number(document.querySelector('[data-explore]').dataset.draws"
            " || 0) > n",
            arg=before,
            timeout=10_000,
        )
    except NoRedraw:
        return False
    return True


# --- one lesson -----------------------------------------------------------------------


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values), 1) if values else float("nan"),
    }


def _by_class(samples: list[tuple[str, float]]) -> dict[str, dict[str, float]]:
    cached = [ms for source, ms in samples if source in ("memory", "disk")]
    uncached = [ms for source, ms in samples if source == "run"]
    return {"cached": _summary(cached), "uncached": _summary(uncached)}


async def explore_lesson(
    base: str, lesson: str, params: Params
) -> tuple[Learners, list[Redraw], list[float], str]:
    drag = drag_of(lesson)
    out = Learners()
    redraws: list[Redraw] = []
    floor: list[float] = []
    tasks = [
        learner(base, lesson, drag, n, params, out) for n in range(params.learners)
    ]
    note, *_ = await asyncio.gather(
        browser_learner(base, lesson, drag, params, redraws),
        floor_probe(base, lesson, params, floor),
        *tasks,
    )
    return out, redraws, floor, str(note)


def _warm(base: str, lesson: str) -> None:
    """Before the clock: the lesson page (which starts the daphne's model worker
    process) and one set nobody asked for, answered once the worker is up."""
    import httpx

    drag = drag_of(lesson)
    first = {drag.slider: drag.grid[1], drag.context: drag.context_grid[1]}
    with httpx.Client(base_url=base, timeout=120.0) as client:
        for path, query in (
            (f"/course/{lesson}/", {}),
            (f"/course/{lesson}/model.json", first),
        ):
            if client.get(path, params=query).status_code != 200:
                raise BenchError(f"{path} does not answer 200")


def measure_lesson(
    base: str, lesson: str, params: Params, children: Children
) -> dict[str, Any]:
    _warm(base, lesson)
    web = children.processes["explore-web"].pid
    meter = CpuMeter({"daphne": [web]})
    load_before = os.getloadavg()
    meter.start()
    began = time.monotonic()
    out, redraws, floor, note = asyncio.run(explore_lesson(base, lesson, params))
    wall = time.monotonic() - began
    cpu = meter.stop()
    children.check_alive()
    http = _by_class([(s.source, s.ms) for s in out.samples])
    render = _summary([r.render_ms for r in redraws])
    browser = {
        "fetch_ms": _by_class([(r.source, r.fetch_ms) for r in redraws]),
        "render_ms": render,
        "total_ms": _by_class([(r.source, r.fetch_ms + r.render_ms) for r in redraws]),
        "note": note,
    }
    render_p95 = render["p95"]
    change_to_chart = {name: round(http[name]["p95"] + render_p95, 1) for name in http}
    return {
        "lesson": lesson,
        "drag": drag_of(lesson).slider,
        "wall_s": round(wall, 1),
        "requests": len(out.samples),
        "requests_per_s": round(len(out.samples) / wall, 1) if wall else 0.0,
        "errors": out.errors,
        "sources": {
            source: sum(1 for s in out.samples if s.source == source)
            for source in ("run", "memory", "disk")
        },
        "http_ms": http,
        "server_ms": _by_class([(s.source, s.server_ms) for s in out.samples]),
        "floor_304_ms": _summary(floor),
        "browser": browser,
        "change_to_chart_p95_ms": change_to_chart,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_s": cpu,
        "targets_met": {
            f"{name} p95 ≤ {TARGET_P95_MS:.0f} ms": not math.isnan(value)
            and value <= TARGET_P95_MS
            for name, value in change_to_chart.items()
        },
    }


def run(children: Children, options: argparse.Namespace) -> dict[str, Any]:
    params = Params.from_options(options)
    collect_static(children)
    parts = []
    for lesson in params.lessons:
        # Side by side: the production setting, then the anchor, each on a fresh
        # daphne with an empty model cache.
        for mode, processes in MODES.items():
            print(
                f"explore: {params.learners} learners and a browser on {lesson},"
                f" model runs in the {mode}, {params.duration_s:.0f} s",
                flush=True,
            )
            var_dir = Path(tempfile.mkdtemp(prefix="bench-explore-"))
            try:
                base = start_site(children, var_dir, processes)
                part = measure_lesson(base, lesson, params, children)
                children.stop("explore-web")
            finally:
                shutil.rmtree(var_dir, ignore_errors=True)
            parts.append({"mode": mode, **part})
    result = {"params": asdict(params), "lessons": parts}
    print(text_report(result), flush=True)
    return result


# --- the report ---------------------------------------------------------------------


def text_report(result: dict[str, Any]) -> str:
    rows = []
    for part in result["lessons"]:
        for name in ("cached", "uncached"):
            http = part["http_ms"][name]
            total = part["browser"]["total_ms"][name]
            rows.append(
                [
                    part["lesson"],
                    part["mode"],
                    name,
                    http["n"],
                    http["p50"],
                    http["p95"],
                    http["p99"],
                    part["server_ms"][name]["p95"],
                    total["n"],
                    total["p50"],
                    total["p95"],
                    part["change_to_chart_p95_ms"][name],
                ]
            )
    lines = [
        format_table(
            [
                "lesson",
                "model runs in",
                "sets",
                "http n",
                "http p50",
                "http p95",
                "http p99",
                "server p95",
                "browser n",
                "browser p50",
                "browser p95",
                "p95 http+redraw",
            ],
            rows,
        ),
        "",
    ]
    for part in result["lessons"]:
        browser = part["browser"]
        note = f" ({browser['note']})" if browser["note"] else ""
        floor = part["floor_304_ms"]
        lines += [
            f"{part['lesson']}, model in the {part['mode']}:"
            f" {part['requests']} answers in {part['wall_s']} s"
            f" ({part['requests_per_s']}/s; model ran {part['sources']['run']},"
            f" kept {part['sources']['memory'] + part['sources']['disk']}),"
            f" errors {part['errors'] or 'none'};"
            f" browser redraw p50 {browser['render_ms']['p50']} ms,"
            f" p95 {browser['render_ms']['p95']} ms{note};"
            f" floor (a 304 of the same view) p50 {floor['p50']} ms,"
            f" p95 {floor['p95']} ms;"
            f" load {part['load_average_before'][0]} → {part['load_average_after'][0]};"
            f" daphne CPU {part['cpu_s'].get('daphne')} s of"
            f" {part['cpu_s'].get('capacity')} s",
            *(
                f"[{'x' if ok else ' '}] {part['lesson']} ({part['mode']}): {name}"
                for name, ok in part["targets_met"].items()
            ),
            "",
        ]
    return "\n".join(lines).rstrip()


def markdown_report(document: dict[str, Any]) -> str:
    result = document["results"][NAME]
    params = result["params"]
    note = " ".join(
        [
            f"{params['learners']} anonymous learners (httpx, one asyncio loop in"
            " the benchmark process) and one headless Chromium drag a slider of",
            f"each lesson for {params['duration_s']:.0f} s against one daphne: six",
            f"moves {params['move_gap_s']} s apart with another parameter at random,",
            "a pause, the same six back, and again; once with the model runs in a",
            "worker process beside the daphne (the production setting,",
            "`LAB_EXPLORE_PROCESSES=1`) and once in the daphne itself (`0`, one at",
            "a time), each on a fresh daphne with an empty model cache.",
            "*http*: request sent → JSON parsed, per class of answer (cached: the",
            "set was kept, in memory or on disk; uncached: the model ran for it).",
            "*server*: the view's own time for the tables (Server-Timing: the",
            "lookup, and the model run when uncached). *floor*: the same view",
            "answering 304 five times a second beside them, what any answer costs",
            "under this load. *browser*: the page's own measure of each move,",
            "request sent → charts and tables painted. *p95 http+redraw*: the HTTP",
            "p95 of the twenty plus the browser's redraw p95. None includes the",
            "page's 150 ms debounce. Target: p95 ≤",
            f"{TARGET_P95_MS:.0f} ms. The machine is shared: see the load averages.",
        ]
    )
    return markdown_page(
        document,
        title="Explorable lessons: a class moving sliders at once",
        report=text_report(result),
        note=note,
    )
