"""A learner's own pages: their progress across the course, and deleting the account.

Signing up, in and out, and changing the e-mail address or the password are
django-allauth's pages (``/accounts/…``), dressed in the site's layout.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from course.pages import course_areas
from course.selectors import lab_runs_of, lab_usage, progress_by_slug
from course.services.labqueue import Requester, requester_limits
from course.services.learners import AccountError, account_delete
from course.visitors import user_id_of, visitor_of


@login_required
def account_home(request: HttpRequest) -> HttpResponse:
    """The learner's progress across the course, their recent runs and quotas."""
    user_id = user_id_of(request)
    assert user_id is not None  # login_required
    areas = course_areas(progress_by_slug(user_id=user_id))
    lessons = [entry for area in areas for entry in area.lessons]
    visitor = visitor_of(request)
    runs = lab_runs_of(visitor=visitor, limit=12)
    usage = lab_usage(visitor=visitor, client="", anonymous=False, now=timezone.now())
    limits = requester_limits(Requester(visitor="", client="", user=request.user))
    return render(
        request,
        "account/home.html",
        {
            "areas": areas,
            "total": len(lessons),
            "read": sum(1 for entry in lessons if entry.progress.read),
            "runs_total": sum(entry.progress.lab_runs for entry in lessons),
            "answers": sum(entry.answered for entry in lessons),
            "questions": sum(entry.questions for entry in lessons),
            "solved": sum(entry.solved for entry in lessons),
            "confirmed": sum(entry.confirmed for entry in lessons),
            "challenges": sum(len(entry.challenges) for entry in lessons),
            "runs": runs,
            "live_last_hour": sum(1 for spent in usage.last_hour if spent.live),
            "cost_last_hour": round(sum(spent.cost for spent in usage.last_hour), 1),
            "in_flight": usage.in_flight,
            "limits": limits,
            "reuse_min": settings.LAB_REUSE_S // 60,
        },
    )


class DeleteAccountForm(forms.Form):
    password = forms.CharField(
        label="Your password",
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )
    confirm = forms.BooleanField(
        label="Delete my account, my lab runs, my predictions and my progress now. "
        "This cannot be undone.",
    )

    def __init__(self, *args: object, user: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.user = user

    def clean_password(self) -> str:
        password = str(self.cleaned_data.get("password", ""))
        check = getattr(self.user, "check_password", None)
        if check is None or not check(password):
            raise forms.ValidationError("That is not your password.")
        return password


@login_required
@require_http_methods(["GET", "POST"])
def account_delete_view(request: HttpRequest) -> HttpResponse:
    """Ask for the password and a confirmation, then delete the account at once."""
    form = DeleteAccountForm(request.POST or None, user=request.user)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                audit = account_delete(user_id=_signed_in(request))
            except AccountError as error:
                form.add_error(None, str(error))
                status = 409
            else:
                logout(request)
                messages.success(
                    request,
                    f"Your account is deleted, with {audit.lab_runs} lab "
                    f"run{pluralize(audit.lab_runs)}, {audit.predictions} "
                    f"prediction{pluralize(audit.predictions)} and your progress on "
                    f"{audit.progress_rows} lesson{pluralize(audit.progress_rows)}.",
                )
                return redirect("home")
        else:
            status = 400
    response = render(request, "account/delete.html", {"form": form}, status=status)
    response["Cache-Control"] = "private, no-store"
    return response


def _signed_in(request: HttpRequest) -> int:
    user_id = user_id_of(request)
    if user_id is None:  # an inactive account: login_required let it through
        raise AccountError("This account is not active.")
    return user_id
