"""Course pages: the lesson list, a lesson with its lab, and starting a lab run."""

from __future__ import annotations

import uuid

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseRedirectBase
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from course.forms import LabForm
from course.labs.base import Lab
from course.labs.registry import lab_find
from course.lessons import Lesson, lesson_get
from course.selectors import course_outline, lab_job_get
from course.services import LIVE_KEY, LabQueueFull, lab_run_enqueue
from jobs.selectors import jobstatus_payload


class HttpResponseSeeOther(HttpResponseRedirectBase):
    status_code = 303


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _lesson_or_404(slug: str) -> Lesson:
    lesson = lesson_get(slug)
    if lesson is None:
        raise Http404("No such lesson")
    return lesson


@require_GET
def course_index(request: HttpRequest) -> HttpResponse:
    outline = course_outline()
    built = sum(1 for _, lessons in outline for _, has_lab in lessons if has_lab)
    return render(
        request,
        "course/index.html",
        {"outline": outline, "built": built, "total": 25},
    )


def _render_lesson(
    request: HttpRequest,
    lesson: Lesson,
    lab: Lab | None,
    form: LabForm | None,
    *,
    status: int = 200,
) -> HttpResponse:
    job_payload = None
    job_missing = False
    raw_job = request.GET.get("job")
    if lab is not None and raw_job:
        try:
            job = lab_job_get(job_id=uuid.UUID(raw_job))
        except ValueError:
            job = None
        if job is not None and job.name == lab.slug:
            job_payload = jobstatus_payload(job)
            if form is None or not form.is_bound:
                form = LabForm(
                    lab,
                    initial=_initial(lab, job.params),
                    allow_live=_may_run_live(request),
                )
        else:
            job_missing = True
    lab_config = None
    if lab is not None:
        lab_config = {
            "slug": lab.slug,
            "runUrl": reverse("course-lab-run", args=[lab.slug]),
            "statusUrl": reverse("jobstatus-status", args=[uuid.UUID(int=0)]),
            "charts": [chart.as_json() for chart in lab.charts],
            "job": job_payload,
        }
    return render(
        request,
        "course/lesson.html",
        {
            "lesson": lesson,
            "lab": lab,
            "form": form,
            "lab_config": lab_config,
            "job_missing": job_missing,
        },
        status=status,
    )


def _initial(lab: Lab, stored: object) -> dict[str, object]:
    values = stored if isinstance(stored, dict) else {}
    initial: dict[str, object] = {}
    for param in lab.params:
        if param.name in values:
            value = values[param.name]
            initial[param.name] = param.text(value) if value is not None else ""
    if lab.live is not None and values.get(LIVE_KEY) is True:
        initial[LabForm.LIVE_FIELD] = True
    return initial


def _may_run_live(request: HttpRequest) -> bool:
    """Return whether the user may run live parts (they start processes, write rows)."""
    return bool(request.user.is_authenticated and request.user.is_staff)


@require_GET
def course_lesson(request: HttpRequest, slug: str) -> HttpResponse:
    lesson = _lesson_or_404(slug)
    lab = lab_find(slug)
    form = LabForm(lab, allow_live=_may_run_live(request)) if lab is not None else None
    return _render_lesson(request, lesson, lab, form)


@require_POST
def course_lab_run(request: HttpRequest, slug: str) -> HttpResponse:
    """Validate the parameters, queue the run, answer where to follow it."""
    lesson = _lesson_or_404(slug)
    lab = lab_find(slug)
    if lab is None:
        raise Http404("This lesson's lab is not built yet")
    form = LabForm(lab, data=request.POST, allow_live=_may_run_live(request))
    if not form.is_valid():
        # Asking for the live part without the right to is forbidden, not malformed.
        status = 403 if form.live_refused else 400
        if _wants_json(request):
            errors = {name: list(messages) for name, messages in form.errors.items()}
            return JsonResponse({"errors": errors}, status=status)
        return _render_lesson(request, lesson, lab, form, status=status)
    try:
        job = lab_run_enqueue(
            lab=lab, params=form.params, user=request.user, live=form.live
        )
    except LabQueueFull as full:
        # Backpressure reaches the user as a quick, temporary refusal.
        if _wants_json(request):
            refused: HttpResponse = JsonResponse({"error": str(full)}, status=503)
        else:
            form.add_error(None, str(full))
            refused = _render_lesson(request, lesson, lab, form, status=503)
        refused["Retry-After"] = str(full.retry_after_s)
        return refused
    lesson_url = f"{reverse('course-lesson', args=[slug])}?job={job.id}"
    if _wants_json(request):
        status_url = reverse("jobstatus-status", args=[job.id])
        response = JsonResponse(
            {
                "job": str(job.id),
                "version": job.version,
                "status_url": status_url,
                "lesson_url": lesson_url,
            },
            status=202,
        )
        response["Location"] = status_url
        return response
    return HttpResponseSeeOther(lesson_url)
