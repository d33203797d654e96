"""The admin's "Bounded queues" page: each bound, its rq queue and its workers.

Reading and acting both need the queues dashboard's permission (``django_rq.admin``):
the page is the dashboard's view of what stands in front of rq's queues, and its two
actions change what the dashboard's workers do.

- **Resize** (POST, CSRF): the capacity every producer of the bound admits up to,
  from their next offer on (``jobs.backpressure.bound_resize``); an empty field
  gives the producers their own capacity back.
- **Resume workers** (POST, CSRF): lifts rq's suspension (``rq resume``), shown
  only while the workers are suspended.

Both are logged with the operator's name (there is no row to hang an admin log
entry on: the bounds live in Redis).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import django_rq
import redis
from django import forms
from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_http_methods

from jobs.backpressure import bound_resize
from jobs.bounds import bounds_read, workers_resume
from jobs.permissions import RQ_DASHBOARD, user_may

log = logging.getLogger("jobs.bounds")

TEMPLATE = "admin/jobs/bounded_queues.html"
CAPACITY_MAX = 1_000_000


class ResizeForm(forms.Form):
    bound = forms.CharField(max_length=200, widget=forms.HiddenInput)
    capacity = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=CAPACITY_MAX,
        label="New capacity",
        help_text="Empty: the producers' own capacity again.",
    )


def _connection() -> redis.Redis:
    connection: redis.Redis = django_rq.get_connection("default")
    return connection


def _guard(request: HttpRequest) -> None:
    if not user_may(request.user, RQ_DASHBOARD):
        raise PermissionDenied("The bounded queues need the queues dashboard's right.")


def _render(
    request: HttpRequest,
    site: AdminSite,
    *,
    failed: ResizeForm | None = None,
    status: int = 200,
) -> TemplateResponse:
    report = None
    try:
        report = bounds_read(_connection())
    except redis.RedisError as error:
        log.warning("bounded queues page: Redis unreachable: %s", error)
    rows = []
    for bound in report.bounds if report else []:
        form = (
            failed
            if failed is not None and failed.data.get("bound") == bound.name
            else ResizeForm(initial={"bound": bound.name, "capacity": bound.resized})
        )
        rows.append((bound, form))
    context = {
        **site.each_context(request),
        "title": "Bounded queues",
        "report": report,
        "rows": rows,
    }
    return TemplateResponse(request, TEMPLATE, context, status=status)


def _views(site: AdminSite) -> tuple[Callable[..., HttpResponse], ...]:
    def page(request: HttpRequest) -> TemplateResponse:
        _guard(request)
        return _render(request, site)

    @require_http_methods(["POST"])
    def resize(request: HttpRequest) -> HttpResponse:
        _guard(request)
        form = ResizeForm(request.POST)
        if not form.is_valid():
            return _render(request, site, failed=form, status=400)
        name: str = form.cleaned_data["bound"]
        capacity: int | None = form.cleaned_data["capacity"]
        bound_resize(_connection(), name, capacity)
        who = request.user.get_username()
        log.warning("bound %s resized to %s by %s", name, capacity or "default", who)
        done = (
            f"to {capacity} places" if capacity else "back to its producers' capacity"
        )
        messages.success(request, f"Bound “{name}” resized {done}.")
        return HttpResponseRedirect(reverse("admin:bounded_queues"))

    @require_http_methods(["POST"])
    def resume(request: HttpRequest) -> HttpResponse:
        _guard(request)
        if workers_resume(_connection(), who=request.user.get_username()):
            messages.success(request, "Workers resumed: they take jobs again.")
        else:
            messages.info(request, "The workers were not suspended.")
        return HttpResponseRedirect(reverse("admin:bounded_queues"))

    return page, resize, resume


def bounded_queue_pages(site: AdminSite) -> list[URLPattern]:
    """The page and its two actions for ``site`` (``add_pages``)."""
    page, resize, resume = _views(site)
    return [
        path("bounded-queues/", site.admin_view(page), name="bounded_queues"),
        path(
            "bounded-queues/resize/",
            site.admin_view(resize),
            name="bounded_queues_resize",
        ),
        path(
            "bounded-queues/resume-workers/",
            site.admin_view(resume),
            name="bounded_queues_resume",
        ),
    ]
