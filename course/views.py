"""Course pages: the lesson list, a lesson with its lab, and starting a lab run."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseRedirectBase
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from course.compare import (
    FIRST,
    SECOND,
    chart_pair,
    params_compared,
    tables_compared,
)
from course.forms import LabForm
from course.labs.harness.base import Lab
from course.labs.registry import lab_find
from course.lessons import Lesson, lesson_get
from course.pages import (
    code_links,
    course_areas,
    lesson_neighbours,
    run_explain,
    see_links,
)
from course.selectors import (
    lab_job_get,
    lab_runs_recent,
    progress_by_slug,
    progress_get,
)
from course.services import (
    LIVE_KEY,
    PREDICTION_KEY,
    LabQueueFull,
    LabRunsInFlight,
    lab_run_enqueue,
    progress_answer,
    progress_lab_run,
    progress_mark_read,
)
from course.sourcecode import source_render
from course.textbook import LessonText, lesson_text
from jobs.models import JobStatus
from jobs.selectors import jobstatus_payload
from library.permissions import RUN_LIVE_LAB, user_may


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
    progress = progress_by_slug(user_id=_user_id(request))
    areas = course_areas(progress)
    lessons = [entry for area in areas for entry in area.lessons]
    return render(
        request,
        "course/index.html",
        {
            "areas": areas,
            "signed_in": request.user.is_authenticated,
            "total": len(lessons),
            "minutes": sum(entry.minutes for entry in lessons),
            "done": sum(1 for entry in lessons if entry.progress.read),
        },
    )


def _user_id(request: HttpRequest) -> int | None:
    user = request.user
    return int(user.pk) if user.is_authenticated else None


def _visitor(request: HttpRequest, *, create: bool = False) -> str:
    """Return who owns the runs made from this browser ("" if nobody yet).

    A signed-in learner is ``user:<id>``. An anonymous visitor is a digest of their
    session key (the key itself is a credential and never stored); with ``create``
    the session is started so their first run has an owner.
    """
    user_id = _user_id(request)
    if user_id is not None:
        return f"user:{user_id}"
    key = request.session.session_key
    if key is None and create:
        request.session["lab_visitor"] = True  # modified: the cookie is sent
        request.session.save()
        key = request.session.session_key
    if key is None:
        return ""
    return "anon:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _run_of(lab: Lab, raw_id: str) -> JobStatus | None:
    """Return the run of ``lab`` with id ``raw_id``; None if malformed or not one."""
    try:
        job = lab_job_get(job_id=uuid.UUID(raw_id))
    except ValueError:
        return None
    return job if job is not None and job.name == lab.slug else None


def _render_lesson(
    request: HttpRequest,
    lesson: Lesson,
    lab: Lab | None,
    form: LabForm | None,
    *,
    status: int = 200,
) -> HttpResponse:
    text = lesson_text(lesson.slug)
    job_payload = None
    job_missing = False
    explained = None
    raw_job = request.GET.get("job")
    if lab is not None and raw_job:
        job = _run_of(lab, raw_job)
        if job is not None:
            job_payload = jobstatus_payload(job)
            explained = run_explain(lab=lab, text=text, job=job)
            if form is None or not form.is_bound:
                form = _lab_form(request, lab, text, initial=_initial(lab, job.params))
        else:
            job_missing = True
    lab_config = None
    if lab is not None:
        lab_config = {
            "slug": lab.slug,
            "runUrl": reverse("course-lab-run", args=[lab.slug]),
            "statusUrl": reverse("jobstatus-status", args=[uuid.UUID(int=0)]),
            "explainUrl": reverse(
                "course-run-explained", args=[lab.slug, uuid.UUID(int=0)]
            ),
            "charts": [chart.as_json() for chart in lab.charts],
            "job": job_payload,
        }
    user_id = _user_id(request)
    progress = progress_get(user_id=user_id, slug=lesson.slug)
    visitor = _visitor(request)
    runs = (
        lab_runs_recent(slug=lab.slug, visitor=visitor)
        if lab is not None and visitor
        else []
    )
    response = render(
        request,
        "course/lesson.html",
        {
            "lesson": lesson,
            "text": text,
            "lab": lab,
            "has_live": lab is not None and lab.live is not None,
            "form": form,
            "lab_config": lab_config,
            "job_missing": job_missing,
            "explained": explained,
            "neighbours": lesson_neighbours(lesson),
            "code_links": code_links(text),
            "see_links": see_links(text),
            "progress": progress,
            "runs": runs,
            "answered": progress.answered_of(len(text.questions) if text else 0),
            "progress_url": reverse("course-progress", args=[lesson.slug])
            if user_id is not None
            else "",
        },
        status=status,
    )
    return response


def _lab_form(
    request: HttpRequest,
    lab: Lab,
    text: LessonText | None,
    **kwargs: Any,
) -> LabForm:
    prompt = text.predict.prompt if text is not None and text.predict else ""
    return LabForm(
        lab, allow_live=_may_run_live(request), predict_prompt=prompt, **kwargs
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
    # Every right is named in one place (library.permissions), this one too.

    return user_may(request.user, RUN_LIVE_LAB)


@require_GET
def course_lesson(request: HttpRequest, slug: str) -> HttpResponse:
    lesson = _lesson_or_404(slug)
    lab = lab_find(slug)
    text = lesson_text(slug)
    form = _lab_form(request, lab, text) if lab is not None else None
    return _render_lesson(request, lesson, lab, form)


@require_POST
def course_lab_run(request: HttpRequest, slug: str) -> HttpResponse:
    """Validate the parameters, queue the run, answer where to follow it."""
    lesson = _lesson_or_404(slug)
    lab = lab_find(slug)
    if lab is None:
        raise Http404("This lesson's lab is not built yet")
    form = _lab_form(request, lab, lesson_text(slug), data=request.POST)
    if not form.is_valid():
        # Asking for the live part without the right to is forbidden, not malformed.
        status = 403 if form.live_refused else 400
        if _wants_json(request):
            errors = {name: list(messages) for name, messages in form.errors.items()}
            return JsonResponse({"errors": errors}, status=status)
        return _render_lesson(request, lesson, lab, form, status=status)
    try:
        job = lab_run_enqueue(
            lab=lab,
            params=form.params,
            user=request.user,
            live=form.live,
            prediction=form.prediction,
            visitor=_visitor(request, create=True),
        )
    except LabRunsInFlight as busy:
        # This visitor's own limit: a message on the page, not a server error.
        if _wants_json(request):
            return JsonResponse({"error": str(busy)}, status=429)
        form.add_error(None, str(busy))
        return _render_lesson(request, lesson, lab, form, status=429)
    except LabQueueFull as full:
        # Backpressure reaches the user as a quick, temporary refusal.
        if _wants_json(request):
            refused: HttpResponse = JsonResponse({"error": str(full)}, status=503)
        else:
            form.add_error(None, str(full))
            refused = _render_lesson(request, lesson, lab, form, status=503)
        refused["Retry-After"] = str(full.retry_after_s)
        return refused
    user_id = _user_id(request)
    if user_id is not None:
        progress_lab_run(user_id=user_id, slug=slug)
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


@require_GET
def course_run_explained(
    request: HttpRequest, slug: str, job_id: uuid.UUID
) -> HttpResponse:
    """The interpretation of one finished run, as a fragment the lesson page inserts."""
    lesson = _lesson_or_404(slug)
    lab = lab_find(lesson.slug)
    job = lab_job_get(job_id=job_id)
    if lab is None or job is None or job.name != lab.slug:
        raise Http404("No such run of this lab")
    explained = run_explain(lab=lab, text=lesson_text(slug), job=job)
    if explained is None:
        return HttpResponse(status=204)  # not finished, or failed: nothing to explain
    response = render(
        request,
        "course/_interpretation.html",
        {"explained": explained, "lesson": lesson},
    )
    response["Cache-Control"] = "private, no-cache"
    return response


@require_GET
def course_runs_compared(request: HttpRequest, slug: str) -> HttpResponse:
    """Two runs of the lesson's lab side by side: parameters, tables and charts."""
    lesson = _lesson_or_404(slug)
    lab = lab_find(slug)
    if lab is None:
        raise Http404("This lesson's lab is not built yet")
    jobs = [job for raw in request.GET.getlist("run") if (job := _run_of(lab, raw))]
    if len(jobs) != 2:
        return render(
            request,
            "course/compare.html",
            {"lesson": lesson, "lab": lab, "error": True},
            status=400,
        )
    first, second = jobs
    tables = [_tables(first), _tables(second)]
    charts = []
    for chart in lab.charts:
        pair = chart_pair(chart, tables[0].get(chart.table), tables[1].get(chart.table))
        if pair is not None:
            charts.append({"spec": pair[0], "table": pair[1]})
    response = render(
        request,
        "course/compare.html",
        {
            "lesson": lesson,
            "lab": lab,
            "runs": [(FIRST, first), (SECOND, second)],
            "params": params_compared(
                _stored(first), _stored(second), [p.name for p in lab.params]
            ),
            "predictions": [_stored(job).get(PREDICTION_KEY) for job in jobs],
            "live": [_stored(job).get(LIVE_KEY) is True for job in jobs],
            "pairs": tables_compared(tables[0], tables[1]),
            "charts": charts,
        },
    )
    response["Cache-Control"] = "private, no-cache"
    return response


def _stored(job: Any) -> dict[str, object]:
    return dict(job.params) if isinstance(job.params, dict) else {}


def _tables(job: Any) -> dict[str, Any]:
    result = job.result if isinstance(job.result, dict) else {}
    tables = result.get("tables")
    return dict(tables) if isinstance(tables, dict) else {}


_PROGRESS_EVENTS = ("read", "answer")


@require_POST
def course_progress(request: HttpRequest, slug: str) -> HttpResponse:
    """Record a signed-in learner's step: the lesson read, or an answer opened."""
    lesson = _lesson_or_404(slug)
    user_id = _user_id(request)
    if user_id is None:
        return JsonResponse({"error": "Sign in to keep your progress."}, status=403)
    event = request.POST.get("event", "")
    if event not in _PROGRESS_EVENTS:
        return JsonResponse({"error": "event must be read or answer"}, status=400)
    if event == "read":
        progress_mark_read(user_id=user_id, slug=lesson.slug)
    else:
        text = lesson_text(lesson.slug)
        total = len(text.questions) if text is not None else 0
        try:
            question = int(request.POST.get("question", ""))
        except ValueError:
            question = -1
        if not 0 <= question < total:
            return JsonResponse(
                {"error": f"question must be 0 to {total - 1}"}, status=400
            )
        progress_answer(user_id=user_id, slug=lesson.slug, question=question)
    if _wants_json(request):
        return JsonResponse({"ok": True})
    return HttpResponseSeeOther(reverse("course-lesson", args=[lesson.slug]))


@require_GET
def course_source(request: HttpRequest, path: str) -> HttpResponse:
    """A read-only, highlighted view of one of this repository's own source files."""
    start, end = _line_range(request.GET.get("lines", ""))
    page = source_render(path, start=start, end=end)
    if page is None:
        raise Http404("Not a source file of this project")
    response = render(
        request,
        "course/source.html",
        {"page": page, "start": start, "end": end, "parts": path.split("/")},
    )
    response["Cache-Control"] = "public, max-age=300"
    return response


def _line_range(raw: str) -> tuple[int, int]:
    first, _, last = raw.partition("-")
    try:
        start = int(first)
        end = int(last) if last else start
    except ValueError:
        return 0, 0
    return (start, end) if 0 < start <= end else (0, 0)
