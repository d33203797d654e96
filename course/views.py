"""Course pages: the lesson list, a lesson with its lab, and starting a lab run."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
)
from django.http.response import HttpResponseRedirectBase
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from course.access import SHARE_PARAM, lab_run_owned, lab_run_readable, share_token
from course.challenges.pages import challenge_panel
from course.compare import (
    FIRST,
    SECOND,
    chart_pair,
    params_compared,
    tables_compared,
)
from course.explore import (
    Throttled,
    explore_etag,
    explore_lab,
    explore_params,
    explore_refusal,
    explore_serve,
    explore_since,
)
from course.explore_front import (
    explore_etag_held,
    explore_response,
    explore_unchanged,
)
from course.forms import LabForm
from course.labs.harness.base import Lab
from course.labs.registry import lab_get
from course.lesson_cache import shared_key, shared_page
from course.lessons import Lesson, lesson_get
from course.pages import (
    code_links,
    course_areas,
    lesson_neighbours,
    predict_state,
    run_explain,
    see_links,
)
from course.policies import Refusal, RefusalKind
from course.selectors import (
    LIVE_KEY,
    NO_PROGRESS,
    PREDICTION_KEY,
    ProgressView,
    lab_job_get,
    lab_leader_of,
    lab_runs_recent,
    progress_by_slug,
    progress_get,
    progress_of_session,
)
from course.services.labqueue import (
    Asked,
    LabRefused,
    Requester,
    client_digest,
    lab_run_request,
    requester_limits,
)
from course.services.learners import (
    progress_answer,
    progress_lab_run,
    progress_mark_read,
)
from course.sourcecode import source_render
from course.textbook import LessonText, lesson_text, site_fill
from course.visitors import (
    client_address,
    session_progress,
    session_progress_note,
    user_id_of,
    visitor_of,
)
from jobs.models import JobStatus
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
    progress = _progress_by_slug(request)
    areas = course_areas(progress)
    lessons = [entry for area in areas for entry in area.lessons]
    return render(
        request,
        "course/index.html",
        {
            "areas": areas,
            "signed_in": _user_id(request) is not None,
            "show_progress": _user_id(request) is not None or bool(progress),
            "total": len(lessons),
            "minutes": sum(entry.minutes for entry in lessons),
            "done": sum(1 for entry in lessons if entry.progress.read),
        },
    )


def _user_id(request: HttpRequest) -> int | None:
    return user_id_of(request)


def _progress_by_slug(request: HttpRequest) -> dict[str, ProgressView]:
    """Return the learner's progress, from their account or their session."""
    user_id = _user_id(request)
    if user_id is not None:
        return progress_by_slug(user_id=user_id)
    return progress_of_session(session_progress(request.session))


def _progress_on(request: HttpRequest, slug: str) -> ProgressView:
    user_id = _user_id(request)
    if user_id is not None:
        return progress_get(user_id=user_id, slug=slug)
    return _progress_by_slug(request).get(slug, NO_PROGRESS)


def requester_of(request: HttpRequest) -> Requester:
    return Requester(
        visitor=visitor_of(request, create=True),
        client=client_digest(client_address(request)),
        user=request.user,
    )


def _run_of(request: HttpRequest, lab: Lab[Any], raw_id: str) -> JobStatus | None:
    """Return the run of ``lab`` with id ``raw_id`` if this request may read it.

    None when the id is malformed, names no run of this lab, or the run is someone
    else's and the request carries no share link for it: a learner's runs are
    theirs, and another's id alone shows nothing.
    """
    try:
        job = lab_job_get(job_id=uuid.UUID(raw_id))
    except ValueError:
        return None
    if job is None or job.name != lab.slug or not lab_run_readable(job, request):
        return None
    return job


def _render_lesson(
    request: HttpRequest,
    lesson: Lesson,
    lab: Lab[Any],
    form: LabForm | None,
    *,
    status: int = 200,
    offer: JobStatus | None = None,
    csrf_placeholder: str | None = None,
) -> HttpResponse:
    text = lesson_text(lesson.slug)
    if text is not None:  # {{site}}: the address this page was asked for
        text = site_fill(text, request.build_absolute_uri("/").rstrip("/"))
    job_payload = None
    job_missing = False
    job_joined = False
    share: dict[str, str] = {}
    explained = None
    raw_job = request.GET.get("job")
    stored: dict[str, Any] | None = None
    if raw_job:
        job = _run_of(request, lab, raw_job)
        if job is not None:
            stored = job.params if isinstance(job.params, dict) else {}
            job_payload = jobstatus_payload(job)
            job_joined = lab_leader_of(job_id=job.id) is not None
            share = _share_links(request, lesson, job)
            explained = run_explain(lab=lab, text=text, job=job)
        else:
            job_missing = True
    predict = predict_state(lab=lab, query=request.GET.dict(), stored=stored)
    if form is None or not form.is_bound:
        # The form shows the run's parameters and the learner's prediction.
        initial = _initial(lab, stored)
        if predict.value is not None:
            initial[LabForm.PREDICTION_FIELD] = predict.value_text
        form = _lab_form(request, lab, text, initial=initial)
    lab_config = {
        "slug": lab.slug,
        "runUrl": reverse("course-lab-run", args=[lab.slug]),
        "statusUrl": reverse("jobstatus-status", args=[uuid.UUID(int=0)]),
        "explainUrl": reverse("course-run-explained", args=[lab.slug, uuid.UUID(int=0)])
        + share.get("query", ""),
        # The defaults, so the page can say when a prediction is for others.
        "defaults": {p.name: p.text(p.default) for p in lab.params},
        "charts": [chart.as_json() for chart in lab.charts],
        "transcripts": list(lab.transcripts),
        "job": job_payload,
    }
    progress = _progress_on(request, lesson.slug)
    visitor = visitor_of(request)
    runs = lab_runs_recent(slug=lab.slug, visitor=visitor) if visitor else []
    response = render(
        request,
        "course/lesson.html",
        {
            "lesson": lesson,
            "text": text,
            "lab": lab,
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
            "progress_url": reverse("course-progress", args=[lesson.slug]),
            "signed_in": _user_id(request) is not None,
            "offer": offer,
            "joined": job_joined,
            "share_url": share.get("url", ""),
            "predict": predict,
            "challenges": challenge_panel(
                request, lesson.slug, live_refusal=live_refusal(request)
            ),
            # The shared page's forms get a placeholder, replaced per answer
            # (``lesson_cache``); the context processor's token otherwise.
            **({"csrf_token": csrf_placeholder} if csrf_placeholder else {}),
        },
        status=status,
    )
    return response


def lesson_page(
    request: HttpRequest, lesson: Lesson, *, status: int = 200
) -> HttpResponse:
    """The lesson page as ``course_lesson`` renders it, with another status (a form
    elsewhere on the page was refused, its reason shown beside it)."""
    return _render_lesson(request, lesson, lab_get(lesson.slug), None, status=status)


def _share_links(
    request: HttpRequest, lesson: Lesson, job: JobStatus
) -> dict[str, str]:
    """Return the run's share link for its owner, and the query a shared view keeps.

    The owner of a finished run gets a link others may open; someone who opened
    such a link keeps its token on the page's own follow-up requests.
    """
    token = share_token(job.id)
    if lab_run_owned(job, request):
        if not job.is_finished:
            return {}
        path = reverse("course-lesson", args=[lesson.slug])
        query = f"?job={job.id}&{SHARE_PARAM}={token}"
        return {"url": request.build_absolute_uri(path + query)}
    return {"query": f"?{SHARE_PARAM}={token}"}


def _lab_form(
    request: HttpRequest,
    lab: Lab[Any],
    text: LessonText | None,
    **kwargs: Any,
) -> LabForm:
    prompt = text.predict.prompt if text is not None and text.predict else ""
    return LabForm(
        lab, live_refusal=live_refusal(request), predict_prompt=prompt, **kwargs
    )


def _initial(lab: Lab[Any], stored: object) -> dict[str, object]:
    values = stored if isinstance(stored, dict) else {}
    initial: dict[str, object] = {}
    for param in lab.params:
        if param.name in values:
            value = values[param.name]
            initial[param.name] = param.text(value) if value is not None else ""
    if values.get(LIVE_KEY) is True:
        initial[LabForm.LIVE_FIELD] = True
    return initial


def live_refusal(request: HttpRequest) -> str:
    """Return why this user may not run live parts ("" when they may)."""
    limits = requester_limits(Requester(visitor="", client="", user=request.user))
    if not limits.signed_in:
        return LabForm.LIVE_NEEDS_ACCOUNT
    if not limits.live_allowed:
        return LabForm.LIVE_WITHDRAWN
    return ""


@require_GET
def course_lesson(request: HttpRequest, slug: str) -> HttpResponse:
    lesson = _lesson_or_404(slug)
    lab = lab_get(slug)
    key = shared_key(request, slug)
    if key is not None:  # the page every visitor without a session shares
        return shared_page(
            request,
            key,
            lambda token: _render_lesson(
                request, lesson, lab, None, csrf_placeholder=token
            ),
        )
    # The form is made by _render_lesson: it holds a run's values and prediction.
    return _render_lesson(request, lesson, lab, None)


# How each refusal reaches the client: status, and whether a retry later helps.
REFUSAL_STATUS = {
    RefusalKind.NEEDS_ACCOUNT: 403,
    RefusalKind.WITHDRAWN: 403,
    RefusalKind.TOO_HEAVY: 400,
    RefusalKind.MODEL_ONLY: 400,
    RefusalKind.BUSY: 429,
    RefusalKind.HOURLY: 429,
    RefusalKind.QUEUE_FULL: 503,
}


@require_POST
def course_lab_run(request: HttpRequest, slug: str) -> HttpResponse:
    """Validate the parameters, ask for the run, answer where to follow it."""
    lesson = _lesson_or_404(slug)
    lab = lab_get(slug)
    form = _lab_form(request, lab, lesson_text(slug), data=request.POST)
    if not form.is_valid():
        # Asking for the live part without the right to is forbidden, not malformed.
        status = 403 if form.live_refused else 400
        if _wants_json(request):
            errors = {name: list(messages) for name, messages in form.errors.items()}
            return JsonResponse({"errors": errors}, status=status)
        return _render_lesson(request, lesson, lab, form, status=status)
    try:
        asked = lab_run_request(
            lab=lab,
            params=form.params,
            requester=requester_of(request),
            live=form.live,
            prediction=form.prediction,
            choice=form.choice,
        )
    except LabRefused as refused:
        return _refused(request, lesson, lab, form, refused)
    if asked.job is None:
        return _offered(request, lesson, lab, form, asked)
    _count_run(request, slug)
    return _started(request, slug, asked)


def _refused(
    request: HttpRequest,
    lesson: Lesson,
    lab: Lab[Any],
    form: LabForm,
    refused: LabRefused,
) -> HttpResponse:
    """Answer a refusal: why, and when a retry helps (Retry-After)."""
    refusal = refused.refusal
    status = REFUSAL_STATUS[refusal.kind]
    if _wants_json(request):
        body: dict[str, object] = {
            "error": refusal.message,
            "refusal": str(refusal.kind),
        }
        if refusal.kind is RefusalKind.NEEDS_ACCOUNT:
            body["signup_url"] = reverse("account_signup")
        response: HttpResponse = JsonResponse(body, status=status)
    else:
        form.add_error(None, refusal.message)
        response = _render_lesson(request, lesson, lab, form, status=status)
    if refusal.retry_after_s is not None:
        response["Retry-After"] = str(refusal.retry_after_s)
    return response


def _offered(
    request: HttpRequest, lesson: Lesson, lab: Lab[Any], form: LabForm, asked: Asked
) -> HttpResponse:
    """Offer an identical live run that finished lately, instead of a new one."""
    offer = asked.offer
    assert offer is not None
    if _wants_json(request):
        return JsonResponse(
            {
                "offer": {
                    "finished_at": offer.finished_at.isoformat()
                    if offer.finished_at
                    else None,
                    "message": offer_text(offer),
                }
            }
        )
    return _render_lesson(request, lesson, lab, form, offer=offer)


def offer_text(offer: JobStatus) -> str:
    when = offer.finished_at.strftime("%H:%M:%S UTC") if offer.finished_at else ""
    return (
        f"A live run with exactly these parameters finished at {when}. Take its "
        "measured tables as your run, or run your own anyway: the live numbers "
        "that depend on the machine (times, latencies) differ a little each run."
    )


def _count_run(request: HttpRequest, slug: str) -> None:
    user_id = _user_id(request)
    if user_id is not None:
        progress_lab_run(user_id=user_id, slug=slug)
    else:
        session_progress_note(request.session, slug=slug, lab_run=True)


def _started(request: HttpRequest, slug: str, asked: Asked) -> HttpResponse:
    job = asked.job
    assert job is not None
    lesson_url = f"{reverse('course-lesson', args=[slug])}?job={job.id}"
    if not _wants_json(request):
        return HttpResponseSeeOther(lesson_url)
    status_url = reverse("jobstatus-status", args=[job.id])
    response = JsonResponse(
        {
            "job": str(job.id),
            "version": job.version,
            "status_url": status_url,
            "lesson_url": lesson_url,
            "joined": asked.leader is not None and not asked.reused,
            "reused": asked.reused,
            "message": _shared_text(asked),
        },
        status=202,
    )
    response["Location"] = status_url
    return response


def _shared_text(asked: Asked) -> str:
    if asked.reused:
        return (
            "An identical run finished a few minutes ago: its tables are your run's. "
            "A model run depends only on its parameters, so running it again would "
            "print the same numbers."
        )
    if asked.leader is not None:
        return (
            "Another run with exactly these parameters was already waiting or "
            "running, so you joined it: its progress and result are your run's too, "
            "and the experiment is not run twice."
        )
    return ""


@require_GET
def course_run_explained(
    request: HttpRequest, slug: str, job_id: uuid.UUID
) -> HttpResponse:
    """The interpretation of one finished run, as a fragment the lesson page inserts."""
    lesson = _lesson_or_404(slug)
    lab = lab_get(lesson.slug)
    job = _run_of(request, lab, str(job_id))
    if job is None:
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
    lab = lab_get(slug)
    jobs = [
        job for raw in request.GET.getlist("run") if (job := _run_of(request, lab, raw))
    ]
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


# --- the explorable page: the model's tables for any parameter set ----------------


@require_GET
def course_lesson_model(request: HttpRequest, slug: str) -> HttpResponse:
    """The model's tables (and charts) for the query's parameter set, as JSON.

    Parsed as the lab form parses; no run, record or quota (``course.explore``).
    400 with the field errors, 403 for a set too costly without an account, 429
    with Retry-After past the minute's new sets (503 when the process's model runs
    stay taken); 304 for an answer already held. An anonymous request for a set
    kept in memory is answered before Django by ``course.explore_front``, with the
    same bytes.
    """
    lesson = _lesson_or_404(slug)
    lab = explore_lab(lesson.slug)
    if lab is None:
        raise Http404("This lesson's lab is not built yet")
    params, errors = explore_params(lab, request.GET)
    if params is None:
        return _unstored(JsonResponse({"errors": errors}, status=400))
    refusal = explore_refusal(lab, params, request.user)
    if refusal is not None:
        return _explore_refused(refusal)
    since = explore_since(request.GET.get("since", ""))
    etag = explore_etag(lab, params, since)
    if explore_etag_held(request.headers.get("If-None-Match", ""), etag):
        return explore_unchanged(etag)
    served = explore_serve(lab, params, who=lambda: rate_subject(request))
    if isinstance(served, Throttled):
        response = _unstored(
            JsonResponse({"error": served.message}, status=served.status)
        )
        response["Retry-After"] = str(served.retry_after_s)
        return response
    return explore_response(lab, params, served, since=since, etag=etag)


def rate_subject(request: HttpRequest) -> str:
    """Whose minute a model run counts in (a new explored parameter set, a checked
    challenge answer): the signed-in learner's, or the client address's."""
    user_id = _user_id(request)
    if user_id is not None:
        return f"user:{user_id}"
    return f"addr:{client_digest(client_address(request))}"


def _unstored(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    return response


def _explore_refused(refusal: Refusal) -> HttpResponse:
    body: dict[str, object] = {"error": refusal.message, "refusal": str(refusal.kind)}
    if refusal.kind is RefusalKind.NEEDS_ACCOUNT:
        body["signup_url"] = reverse("account_signup")
    response = _unstored(JsonResponse(body, status=REFUSAL_STATUS[refusal.kind]))
    patch_vary_headers(response, ["Cookie"])  # the answer depends on who asks
    return response


_PROGRESS_EVENTS = ("read", "answer")


@require_POST
def course_progress(request: HttpRequest, slug: str) -> HttpResponse:
    """Record a learner's step: the lesson read, or an answer opened.

    A signed-in learner's steps go to their account; an anonymous visitor's to
    their session, from which they carry over into the account they sign up for.
    """
    lesson = _lesson_or_404(slug)
    event = request.POST.get("event", "")
    if event not in _PROGRESS_EVENTS:
        return JsonResponse({"error": "event must be read or answer"}, status=400)
    question: int | None = None
    if event == "answer":
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
    user_id = _user_id(request)
    if user_id is None:
        session_progress_note(
            request.session, slug=lesson.slug, read=event == "read", answer=question
        )
    elif question is None:
        progress_mark_read(user_id=user_id, slug=lesson.slug)
    else:
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
