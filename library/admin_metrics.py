"""The admin's "Cache metrics" page: per-namespace counters over a chosen window.

The page reads ``metrics_read`` (minute buckets in Redis) and shows, per namespace,
the counters, the request and byte hit ratios, and the course's average-cost formula
(Cache Metrics lesson) filled with the measured times:

    T = t_c + (1 - h) * t_o

Every request pays the lookup ``t_c``; only misses also pay the origin ``t_o``. With
no cache every request pays ``t_o``, so the saving is ``t_o - T``.

The URLs join the project's admin site (``config.admin_site``) through
``cache_metrics_pages``, which ``LibraryConfig.ready`` hands to ``add_pages``;
``admin_view`` gives the pages the admin's login redirect, staff check and CSRF
protection.

Viewing needs an active staff account. Resetting forgets counters for every process
and every window, so it also needs ``library.change_book`` (or a superuser): the
staff who maintain the catalogue are the ones whose edits move these numbers and who
reset before measuring a change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, cast

import redis
from django import forms
from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from library.cache.metrics import (
    COUNTERS,
    REDIS_TOTALS,
    NamespaceMetrics,
    metrics_from_counts,
    metrics_read,
    metrics_reset,
)
from library.permissions import VIEW_OPERATIONS, user_may

__all__ = [
    "RESET_PERMISSION",
    "WINDOWS",
    "CostEstimate",
    "average_cost",
    "cache_metrics_pages",
    "metrics_report",
]

logger = logging.getLogger(__name__)

# (label, minutes), keyed by the ``?window=`` value.
WINDOWS: Final[dict[str, tuple[str, int]]] = {
    "5m": ("5 minutes", 5),
    "1h": ("1 hour", 60),
    "24h": ("24 hours", 24 * 60),
    "3d": ("3 days", 3 * 24 * 60),  # the buckets' lifetime: nothing older exists
}
DEFAULT_WINDOW: Final = "1h"
RESET_PERMISSION: Final = "library.change_book"
TEMPLATE: Final = "admin/cache_metrics.html"


# --- the numbers --------------------------------------------------------------------


@dataclass(frozen=True)
class CostEstimate:
    """The course's ``T = t_c + (1 - h) t_o`` with measured inputs, in ms."""

    hit_ratio: float
    cache_ms: float
    origin_ms: float
    expected_ms: float  # T
    saving_ms: float  # t_o - T: what an average request saves over no cache
    saving_ratio: float  # saving_ms / t_o; 0 when the origin costs nothing

    @property
    def saving_percent(self) -> float:
        return self.saving_ratio * 100


def average_cost(
    *, hit_ratio: float, cache_ms: float, origin_ms: float
) -> CostEstimate:
    """Return the expected mean response time and its saving over no cache."""
    expected = cache_ms + (1 - hit_ratio) * origin_ms
    saving = origin_ms - expected
    return CostEstimate(
        hit_ratio=hit_ratio,
        cache_ms=cache_ms,
        origin_ms=origin_ms,
        expected_ms=expected,
        saving_ms=saving,
        saving_ratio=saving / origin_ms if origin_ms > 0 else 0.0,
    )


@dataclass(frozen=True)
class NamespaceRow:
    """One namespace's counters with the means the page shows."""

    name: str
    metrics: NamespaceMetrics
    requests: int
    mean_cache_ms: float | None  # per lookup (hits and misses both look up)
    mean_origin_ms: float | None  # per production
    cost: CostEstimate | None  # None until there are requests and origin calls

    @property
    def hit_percent(self) -> float | None:
        ratio = self.metrics["hit_ratio"]
        return None if ratio is None else ratio * 100

    @property
    def byte_hit_percent(self) -> float | None:
        ratio = self.metrics["byte_hit_ratio"]
        return None if ratio is None else ratio * 100


@dataclass(frozen=True)
class MetricsReport:
    """What the page shows for one window."""

    rows: list[NamespaceRow]
    total: NamespaceRow | None  # None when no namespace has counters
    redis_evictions: int
    redis_expiries: int

    @property
    def table_rows(self) -> list[NamespaceRow]:
        """Return the namespace rows, then the totals row."""
        return [*self.rows, self.total] if self.total else []


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _row(name: str, metrics: NamespaceMetrics) -> NamespaceRow:
    requests = metrics["hits"] + metrics["misses"]
    mean_cache = _ratio(metrics["cache_ms_total"], requests)
    mean_origin = _ratio(metrics["origin_ms_total"], metrics["origin_calls"])
    hit_ratio = metrics["hit_ratio"]
    cost = None
    if hit_ratio is not None and mean_cache is not None and mean_origin is not None:
        cost = average_cost(
            hit_ratio=hit_ratio, cache_ms=mean_cache, origin_ms=mean_origin
        )
    return NamespaceRow(
        name=name,
        metrics=metrics,
        requests=requests,
        mean_cache_ms=mean_cache,
        mean_origin_ms=mean_origin,
        cost=cost,
    )


def _summed(report: list[NamespaceMetrics]) -> NamespaceMetrics:
    counts = dict.fromkeys(COUNTERS, 0)
    for metrics in report:
        fields = cast(Mapping[str, int], metrics)
        for field in COUNTERS:
            counts[field] += fields[field]
    return metrics_from_counts(counts)


def metrics_report(*, window_minutes: int, now: float | None = None) -> MetricsReport:
    """Return every namespace's row, the totals and Redis's server-wide counts."""
    read = metrics_read(window_minutes, now=now)
    server = read.pop(REDIS_TOTALS)
    rows = [_row(name, metrics) for name, metrics in sorted(read.items())]
    # Summed counters, not an average of ratios: a namespace with ten requests must
    # not weigh as much as one with ten thousand.
    total = _row("All namespaces", _summed(list(read.values()))) if rows else None
    return MetricsReport(
        rows=rows,
        total=total,
        redis_evictions=server["evictions"],
        redis_expiries=server["expiries"],
    )


@dataclass(frozen=True)
class ChartBar:
    """One namespace's pair of bars in the ratio chart; widths in % of the plot."""

    name: str
    label: str
    hit_width: float
    byte_width: float
    label_y: int
    hit_y: int
    byte_y: int


BAR_HEIGHT: Final = 12
ROW_HEIGHT: Final = 58  # label line, two bars, gap


def _chart(rows: list[NamespaceRow]) -> tuple[list[ChartBar], int]:
    """Return the bars of the ratio chart and the chart's height in pixels.

    Drawn on the server (not with static/js/chart.js, which pads its axis above the
    tallest bar, so a ratio of 98 % would get an axis to 150 %): a ratio's axis ends
    at 100 %, and the chart reads without JavaScript.
    """

    def shown(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f} %"

    bars = [
        ChartBar(
            name=row.name,
            label=(
                f"{row.name}: requests {shown(row.hit_percent)}, "
                f"bytes {shown(row.byte_hit_percent)}"
            ),
            hit_width=round(row.hit_percent or 0.0, 1),
            byte_width=round(row.byte_hit_percent or 0.0, 1),
            label_y=index * ROW_HEIGHT + 14,
            hit_y=index * ROW_HEIGHT + 20,
            byte_y=index * ROW_HEIGHT + 20 + BAR_HEIGHT + 2,
        )
        for index, row in enumerate(rows)
    ]
    return bars, len(rows) * ROW_HEIGHT + 18  # room for the axis labels


# --- the views ----------------------------------------------------------------------


class ResetForm(forms.Form):
    namespace = forms.CharField(required=False)  # empty: every namespace
    window = forms.ChoiceField(choices=[(key, key) for key in WINDOWS], required=False)
    confirm = forms.BooleanField(
        required=True,
        error_messages={"required": "Tick the box to confirm the reset."},
    )


def can_reset(request: HttpRequest) -> bool:
    """Return whether the user may forget counters (see the module docstring)."""
    user = request.user
    return user.is_superuser or user.has_perm(RESET_PERMISSION)


def _window(request: HttpRequest) -> str:
    chosen = request.GET.get("window", DEFAULT_WINDOW)
    return chosen if chosen in WINDOWS else DEFAULT_WINDOW


def _page_url(window: str) -> str:
    return f"{reverse('admin:cache_metrics')}?{urlencode({'window': window})}"


def _render(
    request: HttpRequest,
    site: AdminSite,
    *,
    window: str,
    form: ResetForm | None = None,
    status: int = 200,
) -> TemplateResponse:
    label, minutes = WINDOWS[window]
    report: MetricsReport | None = None
    try:
        report = metrics_report(window_minutes=minutes)
    except redis.RedisError as error:
        # The page is how an operator looks into a sick cache: say so, do not 500.
        logger.warning("cache metrics page: Redis unreachable: %s", error)
    context = {
        **site.each_context(request),
        "title": "Cache metrics",
        "window": window,
        "window_label": label,
        "windows": [(key, text) for key, (text, _) in WINDOWS.items()],
        "report": report,
        "chart": _chart(report.table_rows) if report else None,
        "grid": (25, 50, 75, 100),
        "can_reset": can_reset(request),
        "can_view_history": user_may(request.user, VIEW_OPERATIONS),
        "reset_form": form or ResetForm(initial={"window": window}),
    }
    return TemplateResponse(request, TEMPLATE, context, status=status)


def _views(site: AdminSite) -> tuple[Callable[..., HttpResponse], ...]:
    def page(request: HttpRequest) -> TemplateResponse:
        """Show the counters of the window chosen with ``?window=``."""
        return _render(request, site, window=_window(request))

    @require_http_methods(["POST"])
    def reset(request: HttpRequest) -> HttpResponse:
        """Forget one namespace's counters (or all of them), then go back."""
        if not can_reset(request):
            raise PermissionDenied
        form = ResetForm(request.POST)
        if not form.is_valid():
            window = request.POST.get("window", "")
            window = window if window in WINDOWS else DEFAULT_WINDOW
            return _render(request, site, window=window, form=form, status=400)
        namespace: str = form.cleaned_data["namespace"].strip()
        window = form.cleaned_data["window"] or DEFAULT_WINDOW
        try:
            metrics_reset(namespace or None)
        except ValueError as error:  # a name with ":" (the reserved entry)
            form.add_error("namespace", str(error))
            return _render(request, site, window=window, form=form, status=400)
        done = f"namespace “{namespace}”" if namespace else "every namespace"
        messages.success(request, f"Cache counters reset for {done}.")
        return HttpResponseRedirect(_page_url(window))

    return page, reset


def cache_metrics_pages(site: AdminSite) -> list[URLPattern]:
    """``cache-metrics/`` and ``cache-metrics/reset/`` for ``site`` (``add_pages``)."""
    page, reset = _views(site)
    return [
        path("cache-metrics/", site.admin_view(page), name="cache_metrics"),
        path(
            "cache-metrics/reset/",
            site.admin_view(reset),
            name="cache_metrics_reset",
        ),
    ]
