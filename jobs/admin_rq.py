"""The django-rq dashboard behind its own permission, wherever it is mounted.

django-rq guards its views with ``staff_member_required`` only, so any staff member
could empty a queue or clear the failed registry. Every route of the dashboard, at
/admin/rq/ (config/urls.py) and inside the admin (/admin/django_rq/dashboard/, from
its admin registration), passes ``rq_operator_only`` first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from secrets import compare_digest
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver
from django_rq import settings as rq_settings
from django_rq.admin import QueueAdmin
from django_rq.models import Dashboard
from rq.exceptions import NoSuchJobError

from jobs.permissions import RQ_DASHBOARD, user_may

RqView = Callable[..., HttpResponse]


def _has_api_token(request: HttpRequest) -> bool:
    # stats.json and metrics also answer to RQ_API_TOKEN, which stands for no user.
    token = rq_settings.get_api_token()
    header = request.headers.get("Authorization", "")
    if not token or not header.startswith("Bearer "):
        return False
    return compare_digest(str(token), header.removeprefix("Bearer ").strip())


def rq_operator_only(view: RqView) -> RqView:
    """Answer 403 to staff without the dashboard permission.

    Anyone else goes on to the view, whose ``staff_member_required`` sends them to
    sign in (or, for the API views, whose own check refuses them). A job the URL
    names but rq does not hold is a 404.
    """

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if (
            getattr(user, "is_staff", False)
            and not user_may(user, RQ_DASHBOARD)
            and not _has_api_token(request)
        ):
            raise PermissionDenied("The queues dashboard needs its permission.")
        try:
            return view(request, *args, **kwargs)
        except NoSuchJobError:
            # A job id from the URL that rq does not hold (gone, or never was):
            # django-rq lets rq's error through as a 500.
            raise Http404("No such job in this queue.") from None

    return wrapper


def rq_operator_patterns(
    patterns: Sequence[URLPattern | URLResolver],
) -> list[URLPattern]:
    """Return ``patterns`` with every view passing ``rq_operator_only`` first."""
    guarded: list[URLPattern] = []
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            guarded.append(
                URLPattern(
                    pattern.pattern,
                    rq_operator_only(pattern.callback),
                    pattern.default_args,
                    pattern.name,
                )
            )
        else:
            # No include() in django-rq's patterns today; refuse one rather than
            # let it through unguarded.
            raise TypeError(f"cannot guard nested URL patterns: {pattern!r}")
    return guarded


class OperatorQueueAdmin(QueueAdmin):
    """django-rq's admin entry, with every one of its routes guarded."""

    def get_urls(self) -> list[URLPattern]:
        return rq_operator_patterns(super().get_urls())  # type: ignore[no-untyped-call]


# django_rq comes before jobs in INSTALLED_APPS, so its registration exists by now.
if admin.site.is_registered(Dashboard):
    admin.site.unregister(Dashboard)
    admin.site.register(Dashboard, OperatorQueueAdmin)
