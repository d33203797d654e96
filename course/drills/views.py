"""The drill pages: the list, one drill (start, follow, check, stop), its status.

Reading a drill's page needs nothing; starting one needs a signed-in learner (it
starts processes), and a drill is its starter's alone: another account's id shows
nothing. Every change is a POST (CSRF) answered with a redirect to the page; the
page follows its drill with ``static/js/drills.js`` (and without JavaScript, a
refresh while it starts or checks).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseRedirectBase
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from course.drills.catalogue import DRILLS, Drill, drill_get
from course.drills.selectors import drill_latest_of, drill_open_of, drills_passed_of
from course.drills.services import (
    DrillRefused,
    drill_check_ask,
    drill_link_renew,
    drill_start,
    drill_stop,
    drill_touch,
    drills_expire,
)
from course.drills.state import Phase, drill_requests, drill_result
from course.lessons import lesson_get
from course.visitors import user_id_of
from jobs.models import JobStatus

_TOKEN = "drill-pass:{}"


class HttpResponseSeeOther(HttpResponseRedirectBase):
    status_code = 303


def _drill_or_404(slug: str) -> Drill:
    drill = drill_get(slug)
    if drill is None:
        raise Http404("No such drill")
    return drill


def _mine(request: HttpRequest, drill: Drill) -> JobStatus | None:
    user_id = user_id_of(request)
    if user_id is None:
        return None
    return drill_latest_of(user_id=user_id, slug=drill.slug)


def _open(job: JobStatus | None) -> bool:
    return job is not None and job.state in (
        JobStatus.State.QUEUED,
        JobStatus.State.RUNNING,
    )


@require_GET
def drills_index(request: HttpRequest) -> HttpResponse:
    user_id = user_id_of(request)
    passed = drills_passed_of(user_id=user_id) if user_id is not None else set()
    current = drill_open_of(user_id=user_id) if user_id is not None else None
    return render(
        request,
        "course/drills/index.html",
        {
            "drills": [(d, d.slug in passed) for d in DRILLS],
            "current": current,
            "current_drill": drill_get(current.name) if current else None,
            "signed_in": user_id is not None,
            "idle_minutes": settings.DRILL_IDLE_S // 60,
        },
    )


def drill_view(
    request: HttpRequest,
    slug: str,
    *,
    refusal: DrillRefused | None = None,
) -> HttpResponse:
    drill = _drill_or_404(slug)
    drills_expire()  # a drill whose supervisor died shows as ended, not as open
    job = _mine(request, drill)
    if _open(job):
        assert job is not None
        drill_touch(job)
        job.refresh_from_db()
    response = render(
        request,
        "course/drills/detail.html",
        _context(request, drill, job, refusal),
        status=refusal.status if refusal else 200,
    )
    if refusal is not None and refusal.retry_after_s:
        response["Retry-After"] = str(refusal.retry_after_s)
    return response


@require_GET
def drill_page(request: HttpRequest, slug: str) -> HttpResponse:
    return drill_view(request, slug)


def _context(
    request: HttpRequest,
    drill: Drill,
    job: JobStatus | None,
    refusal: DrillRefused | None,
) -> dict[str, Any]:
    status = drill_status(request, job) if job is not None else None
    lessons = [lesson for slug in drill.lessons if (lesson := lesson_get(slug))]
    return {
        "drill": drill,
        "job": job,
        "status": status,
        "lessons": lessons,
        "signed_in": user_id_of(request) is not None,
        "refusal": refusal,
        "other_open": _other_open(request, drill),
    }


def _other_open(request: HttpRequest, drill: Drill) -> Drill | None:
    user_id = user_id_of(request)
    current = drill_open_of(user_id=user_id) if user_id is not None else None
    if current is None or current.name == drill.slug:
        return None
    return drill_get(current.name)


def drill_status(request: HttpRequest, job: JobStatus) -> dict[str, Any]:
    """What the page shows of the learner's drill: state, links, the verdict."""
    result = drill_result(job)
    requests = drill_requests(job)
    port = result.get("port")
    base = f"http://127.0.0.1:{port}" if port and _open(job) else None
    token = request.session.get(_TOKEN.format(job.pk))
    if result.get("signin") != requests.pass_digest:
        token = None  # the supervisor has not stored that link in the sandbox yet
    verdict = result.get("verdict")
    fresh = verdict is not None and result.get("check_for") == requests.check_at
    return {
        "id": str(job.pk),
        "version": job.version,
        "state": job.state,
        "open": _open(job),
        "phase": result.get("phase", Phase.STARTING),
        "message": job.message,
        "progress": job.progress,
        "base": base,
        "signin": f"{base}/course/drills/enter/{token}/" if base and token else None,
        "admin": f"{base}/admin/" if base else None,
        "checking": _open(job) and requests.check_at > 0 and not fresh,
        "verdict": verdict,
        "passed_ever": bool(result.get("passed_ever")),
        "facts": result.get("facts") or {},
    }


@never_cache
@require_GET
def drill_status_json(request: HttpRequest, slug: str) -> JsonResponse:
    """The learner's drill of ``slug`` as JSON (``drills.js`` polls it)."""
    drill = _drill_or_404(slug)
    drills_expire()
    job = _mine(request, drill)
    if job is None:
        return JsonResponse({"state": None})
    if _open(job):
        drill_touch(job)
        job.refresh_from_db()
    return JsonResponse(drill_status(request, job))


@require_POST
def drill_start_view(request: HttpRequest, slug: str) -> HttpResponse:
    drill = _drill_or_404(slug)
    try:
        started = drill_start(drill=drill, user=request.user)
    except DrillRefused as refusal:
        return drill_view(request, slug, refusal=refusal)
    request.session[_TOKEN.format(started.job.pk)] = started.token
    return HttpResponseSeeOther(reverse("drill-page", args=[slug]))


def _open_mine(request: HttpRequest, drill: Drill) -> JobStatus:
    job = _mine(request, drill)
    if job is None or not _open(job):
        raise Http404("You have no open drill here.")
    return job


@require_POST
def drill_check_view(request: HttpRequest, slug: str) -> HttpResponse:
    drill = _drill_or_404(slug)
    drill_check_ask(_open_mine(request, drill))
    return HttpResponseSeeOther(reverse("drill-page", args=[slug]) + "#drill-verdict")


@require_POST
def drill_link_view(request: HttpRequest, slug: str) -> HttpResponse:
    drill = _drill_or_404(slug)
    job = _open_mine(request, drill)
    token = drill_link_renew(job)
    if token is not None:
        request.session[_TOKEN.format(job.pk)] = token
    return HttpResponseSeeOther(reverse("drill-page", args=[slug]))


@require_POST
def drill_stop_view(request: HttpRequest, slug: str) -> HttpResponse:
    drill = _drill_or_404(slug)
    drill_stop(_open_mine(request, drill))
    return HttpResponseSeeOther(reverse("drill-page", args=[slug]))
