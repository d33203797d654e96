"""The generic view guard and the rights of the jobs app's own models.

Being staff only opens the admin; every privileged action needs its own permission
(a superuser has them all). The rights below are declared in ``Meta.permissions`` of
``jobs.JobStatus`` and ``jobs.ScheduledTaskState``; django-rq brings its own
dashboard permission. The domain's rights live in ``library.permissions``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, Final, ParamSpec

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, PermissionsMixin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

RUN_REPORT: Final = "jobs.run_report"
# The scheduler's operator actions: running a task's slot now, pausing and resuming.
RUN_SCHEDULED_TASK: Final = "jobs.run_scheduled_task"
PAUSE_SCHEDULED_TASK: Final = "jobs.pause_scheduled_task"
# django-rq's own (django_rq.models.Dashboard): its dashboard and every action in it.
RQ_DASHBOARD: Final = "django_rq.admin"

P = ParamSpec("P")
View = Callable[Concatenate[HttpRequest, P], HttpResponse]


def user_may(user: AbstractBaseUser | AnonymousUser, perm: str) -> bool:
    """Return whether ``user`` holds ``perm`` (inactive users hold nothing)."""
    if not (user.is_authenticated and user.is_active):
        return False
    return isinstance(user, PermissionsMixin) and user.has_perm(perm)


def permission_required(perm: str) -> Callable[[View[P]], View[P]]:
    """Send anonymous users to sign in; answer 403 to anyone without ``perm``.

    Unlike Django's ``permission_required`` a signed-in user never lands on the
    login form, which would only ask them to sign in again.
    """

    def decorator(view: View[P]) -> View[P]:
        @functools.wraps(view)
        def wrapper(
            request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs
        ) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not user_may(request.user, perm):
                raise PermissionDenied("You do not have the permission for this.")
            return view(request, *args, **kwargs)

        return wrapper

    return decorator
