"""The admin's "Operations history": the system's series as charts over a window.

Every chart is read from Redis minute buckets, never from the database, so the page
costs the same whatever the size of the log:

- the cache's per-namespace hit ratio and origin calls, from the cache's own buckets
  (``library.cache.metrics_history``);
- every series an app declared in ``jobs.series`` (outbox lag, due deliveries,
  throughput, dead letters, rq depth and latency, shed requests), in the order the
  apps declared them, one chart per series and one line per label.

Buckets live 3 days (``BUCKET_LIFETIME_S``), the longest window offered. A point
covers ``step`` minutes (longer windows have coarser points, so a chart holds at
most a few hundred of them): a level keeps the highest sample of its minutes, a
count is shown per minute (or per hour) averaged over them.

A count belongs to its whole bucket, so it is drawn as a step over the bucket's own
time (``draw: "steps"``, from each point's start in ``x`` to the next, the last
one to ``x_end``). Joined as a line, an hour's dead letters that all died at 09:08
made a ramp from 08:00 (the previous, empty hour) to 09:00. Levels are samples and
stay lines.

The data reach the page as JSON in a ``json_script`` element and
``static/js/operations.js`` draws them with uPlot (vendored, ``static/vendor/
uplot``): no inline script. Viewing needs ``VIEW_OPERATIONS``; added to the
admin site by ``operations_history_pages`` (from ``LibraryConfig.ready``) the way
``library.admin_metrics`` adds the Cache metrics page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, TypedDict

import redis
from django.conf import settings
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.views.decorators.cache import never_cache

from jobs.series import BUCKET_LIFETIME_S, History, Kind, series_read, series_specs
from library.cache.metrics_history import CacheHistory, metrics_history
from library.permissions import VIEW_OPERATIONS, user_may

__all__ = [
    "DEFAULT_WINDOW",
    "WINDOWS",
    "Window",
    "operations_charts",
    "operations_history_pages",
]

logger = logging.getLogger(__name__)

TEMPLATE: Final = "admin/operations_history.html"
RETENTION_DAYS: Final = BUCKET_LIFETIME_S // 86400


@dataclass(frozen=True)
class Window:
    label: str
    minutes: int
    step: int  # minutes per point


# Keyed by the ``?window=`` value. Steps keep every chart at 60 to 180 points.
WINDOWS: Final[dict[str, Window]] = {
    "1h": Window("1 hour", 60, 1),
    "6h": Window("6 hours", 6 * 60, 2),
    "24h": Window("24 hours", 24 * 60, 10),
    "3d": Window("3 days", 3 * 24 * 60, 30),  # the buckets' lifetime
}
DEFAULT_WINDOW: Final = "1h"


class ChartLine(TypedDict):
    label: str
    values: list[float | None]
    latest: float | None  # the newest known value, for the text beside the chart


class Chart(TypedDict):
    id: str
    kind: str  # "cache" or a series Kind: the page's empty-state text depends on it
    title: str
    unit: str  # of the y axis
    description: str
    step_minutes: int
    x: list[int]  # each point's start, seconds since the epoch
    x_end: int  # where the last point's bucket ends, seconds since the epoch
    draw: Literal["line", "steps"]  # a level's samples, or a bucket's count
    lines: list[ChartLine]


def _end(x: list[int], step_minutes: int) -> int:
    # No point, no bucket: the end is the start, nothing is drawn either way.
    return x[-1] + step_minutes * 60 if x else 0


def _line(label: str, values: list[float | None]) -> ChartLine:
    known = [value for value in values if value is not None]
    return ChartLine(label=label, values=values, latest=known[-1] if known else None)


def _rate_unit(unit: str, per_minutes: int) -> str:
    return f"{unit} per hour" if per_minutes == 60 else f"{unit} per minute"


def _cache_charts(history: CacheHistory) -> list[Chart]:
    ratio_lines: list[ChartLine] = []
    origin_lines: list[ChartLine] = []
    for namespace, fields in sorted(history.counts.items()):
        ratios: list[float | None] = []
        for hits, misses in zip(fields["hits"], fields["misses"], strict=True):
            ratios.append(
                round(hits / (hits + misses) * 100, 2) if hits + misses else None
            )
        ratio_lines.append(_line(namespace, ratios))
        per_minute: list[float | None] = [
            round(calls / history.step, 3) for calls in fields["origin_calls"]
        ]
        origin_lines.append(_line(namespace, per_minute))
    x = history.times()
    # Both are counts of a bucket (a ratio of two of them): steps.
    return [
        Chart(
            id="cache-hit-ratio",
            kind="cache",
            title="Cache hit ratio per namespace",
            unit="%",
            description="hits / (hits + misses) of each point; a gap is a point "
            "without any lookup.",
            step_minutes=history.step,
            x=x,
            x_end=_end(x, history.step),
            draw="steps",
            lines=ratio_lines,
        ),
        Chart(
            id="cache-origin-calls",
            kind="cache",
            title="Origin calls per namespace",
            unit="calls per minute",
            description="Productions behind the cache: what a miss costs the origin.",
            step_minutes=history.step,
            x=x,
            x_end=_end(x, history.step),
            draw="steps",
            lines=origin_lines,
        ),
    ]


def _series_chart(found: History) -> Chart:
    spec = found.spec
    if spec.kind is Kind.GAUGE:
        unit = spec.unit
        lines = [_line(label, values) for label, values in found.values.items()]
    else:
        # Sums of ``step`` minutes, shown as a rate per ``per_minutes``.
        unit = _rate_unit(spec.unit, spec.per_minutes)
        scale = spec.per_minutes / found.step
        lines = [
            _line(label, [None if v is None else round(v * scale, 3) for v in values])
            for label, values in found.values.items()
        ]
    x = found.times()
    return Chart(
        id=spec.name.replace(".", "-"),
        kind=str(spec.kind),
        title=spec.title,
        unit=unit,
        description=spec.description,
        step_minutes=found.step,
        x=x,
        x_end=_end(x, found.step),
        draw="line" if spec.kind is Kind.GAUGE else "steps",
        lines=lines,
    )


def operations_charts(window: Window, *, now: float | None = None) -> list[Chart]:
    """Return every chart of the page for ``window``; Redis errors propagate."""
    charts = _cache_charts(
        metrics_history(
            ("hits", "misses", "origin_calls"),
            minutes=window.minutes,
            step=window.step,
            now=now,
        )
    )
    specs = series_specs()
    by_step: dict[int, list[str]] = {}
    for spec in specs:
        # A per-hour count needs whole hours per point, whatever the window's step.
        step = (
            max(window.step, spec.per_minutes)
            if spec.kind is not Kind.GAUGE
            else window.step
        )
        by_step.setdefault(step, []).append(spec.name)
    found: dict[str, History] = {}
    for step, names in by_step.items():
        found |= series_read(names, minutes=window.minutes, step=step, now=now)
    charts.extend(_series_chart(found[spec.name]) for spec in specs)
    return charts


class _Payload(TypedDict):
    window: str
    time_zone: str
    charts: list[Chart]


def _page(site: AdminSite) -> Callable[[HttpRequest], HttpResponse]:
    @never_cache
    def page(request: HttpRequest) -> TemplateResponse:
        """Show the charts of the window chosen with ``?window=``."""
        if not user_may(request.user, VIEW_OPERATIONS):
            raise PermissionDenied("The operations history needs its permission.")
        key = request.GET.get("window", DEFAULT_WINDOW)
        if key not in WINDOWS:
            key = DEFAULT_WINDOW  # an unknown window is not worth an error page
        window = WINDOWS[key]
        charts: list[Chart] | None = None
        try:
            charts = operations_charts(window)
        except redis.RedisError as error:
            # The page is how an operator looks into a sick system: say so, no 500.
            logger.warning("operations history: Redis unreachable: %s", error)
        payload = _Payload(
            window=key, time_zone=settings.TIME_ZONE, charts=charts or []
        )
        context = {
            **site.each_context(request),
            "title": "Operations history",
            "window": key,
            "window_label": window.label,
            "windows": [(name, option.label) for name, option in WINDOWS.items()],
            "charts": charts,
            "payload": payload,
            "retention_days": RETENTION_DAYS,
        }
        return TemplateResponse(request, TEMPLATE, context)

    return page


def operations_history_pages(site: AdminSite) -> list[URLPattern]:
    """``operations-history/`` for ``site`` (``add_pages``)."""
    return [
        path(
            "operations-history/",
            site.admin_view(_page(site)),
            name="operations_history",
        ),
    ]
