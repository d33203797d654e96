"""A lesson's challenges: check an answer with the lab's model, open a hint, or run
a solved answer on the live system.

``POST /course/<slug>/challenges/<id>`` with ``action=answer`` (the default) and the
challenge's fields (its parameters, or ``answer``), ``action=hint``, or
``action=live`` (a signed-in learner's solved answer, run live through the lab
service; ``choice`` as the lab form's). With ``Accept: application/json`` the
answer is JSON; a plain form (no JavaScript) is sent back to the lesson at the
challenge, its outcome shown there once. An answer that cannot be checked is a 400
with the reason. ``GET /course/<slug>/challenges/<id>/live`` is the live check's
block as JSON, which the page reads while a live run waits or runs.
"""

from __future__ import annotations

import logging
import re
from typing import TypedDict

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from course.challenges.checker import AnswerError, Verdict
from course.challenges.grading import (
    ChallengeUnavailable,
    challenge_check,
    challenge_live_params,
    challenge_text,
)
from course.challenges.pages import (
    Feedback,
    LiveCheck,
    feedback_store,
    live_check,
    states_of,
)
from course.challenges.selectors import NOT_STARTED, ChallengeState, state_of_entry
from course.challenges.services import challenge_attempt, challenge_hint
from course.challenges.spec import Challenge, challenge_get, challenge_ids
from course.labs.registry import lab_get
from course.lessons import Lesson, lesson_get
from course.ratelimits import minute_take
from course.services.labqueue import Choice, LabRefused, lab_run_request
from course.services.learners import progress_lab_run
from course.views import (
    REFUSAL_STATUS,
    HttpResponseSeeOther,
    lesson_page,
    live_refusal,
    offer_text,
    rate_subject,
    requester_of,
)
from course.visitors import session_challenge_note, user_id_of

log = logging.getLogger("course.challenges")
_NOT_FIELDS = {"csrfmiddlewaretoken", "action"}


def _sentence(reason: str) -> str:
    """A reason as a sentence; one that starts with a parameter's name keeps it."""
    if reason and not _NAMED.match(reason):
        reason = reason[0].upper() + reason[1:]
    return reason if reason.endswith((".", "!", "?")) else f"{reason}."


_NAMED = re.compile(r"^[a-z][a-z0-9_]*:")


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _found(slug: str, challenge_id: str) -> tuple[Lesson, Challenge]:
    lesson = lesson_get(slug)
    challenge = challenge_get(slug, challenge_id) if lesson is not None else None
    if lesson is None or challenge is None:
        raise Http404("No such challenge")
    return lesson, challenge


def _back(lesson: Lesson, challenge: Challenge) -> HttpResponse:
    url = reverse("course-lesson", args=[lesson.slug])
    return HttpResponseSeeOther(f"{url}#{challenge.anchor}")


@require_POST
def course_challenge(
    request: HttpRequest, slug: str, challenge_id: str
) -> HttpResponse:
    """Check an answer to one challenge, or open its next hint."""
    lesson, challenge = _found(slug, challenge_id)
    action = request.POST.get("action", "answer")
    if action == "hint":
        return _hint(request, lesson, challenge)
    if action == "live":
        return _live(request, lesson, challenge)
    if action != "answer":
        return _refuse(
            request, lesson, challenge, "action must be answer, hint or live", {}
        )
    retry = minute_take(
        "challenge", rate_subject(request), settings.LAB_CHALLENGE_ANSWERS_PER_MINUTE
    )
    if retry is not None:
        return _throttled(request, lesson, challenge, retry)
    submitted = {
        name: str(value)
        for name, value in request.POST.items()
        if name not in _NOT_FIELDS
    }
    try:
        verdict = challenge_check(challenge, submitted)
    except AnswerError as error:
        return _refuse(request, lesson, challenge, str(error), submitted)
    except ChallengeUnavailable as error:
        log.error("challenge %s/%s cannot be checked: %s", slug, challenge_id, error)
        return JsonResponse(
            {"error": "This challenge cannot be checked right now."}, status=503
        )
    state = _record(request, challenge, verdict)
    if not _wants_json(request):
        feedback_store(
            request.session,
            slug,
            challenge.id,
            Feedback(
                solved=verdict.solved,
                headline=verdict.headline,
                details=verdict.details,
                values=dict(verdict.answer or submitted),
            ),
        )
        return _back(lesson, challenge)
    ids = challenge_ids(slug)
    states = states_of(request, slug)
    # A solve opens the live check: the page swaps its block in without a reload.
    live = (
        _live_html(request, challenge, _live_state(request, challenge))
        if challenge.live and state.solved
        else ""
    )
    return JsonResponse(
        {
            "live_html": live,
            "solved": verdict.solved,
            "headline": verdict.headline,
            "details": list(verdict.details),
            "attempts": state.attempts,
            "solved_before": state.solved and not verdict.solved,
            "debrief": challenge_text(challenge).debrief if state.solved else "",
            "lessons": [
                {"title": other.title, "url": reverse("course-lesson", args=[slug])}
                for slug in (challenge.lessons if state.solved else ())
                if (other := lesson_get(slug)) is not None
            ],
            "progress": {
                "solved": sum(1 for cid in ids if cid in states and states[cid].solved),
                "total": len(ids),
            },
        }
    )


def _record(
    request: HttpRequest, challenge: Challenge, verdict: Verdict
) -> ChallengeState:
    solved = dict(verdict.answer or {}) if verdict.solved else None
    user_id = user_id_of(request)
    if user_id is not None:
        return challenge_attempt(
            user_id=user_id,
            slug=challenge.slug,
            challenge=challenge.id,
            solved_answer=solved,
        )
    entry = session_challenge_note(
        request.session,
        slug=challenge.slug,
        challenge=challenge.id,
        attempt=True,
        solved_answer=solved,
    )
    return state_of_entry(entry)


def _hint(request: HttpRequest, lesson: Lesson, challenge: Challenge) -> HttpResponse:
    text = challenge_text(challenge)
    total = len(text.hints)
    before = states_of(request, lesson.slug).get(challenge.id)
    if before is not None and before.hints >= total:
        return _refuse(request, lesson, challenge, "every hint is already open", {})
    user_id = user_id_of(request)
    if user_id is not None:
        state = challenge_hint(
            user_id=user_id, slug=lesson.slug, challenge=challenge.id, total=total
        )
    else:
        state = state_of_entry(
            session_challenge_note(
                request.session,
                slug=lesson.slug,
                challenge=challenge.id,
                hint_total=total,
            )
        )
    if not _wants_json(request):
        return _back(lesson, challenge)
    return JsonResponse(
        {"hints": list(text.hints[: state.hints]), "left": total - state.hints}
    )


def _refuse(
    request: HttpRequest,
    lesson: Lesson,
    challenge: Challenge,
    reason: str,
    submitted: dict[str, str],
) -> HttpResponse:
    """Answer 400 with the reason: JSON, or the lesson page showing it."""
    reason = _sentence(reason)
    if _wants_json(request):
        return JsonResponse({"error": reason}, status=400)
    values = {n: v for n, v in submitted.items() if n not in _NOT_FIELDS}
    feedback_store(
        request.session,
        lesson.slug,
        challenge.id,
        Feedback(error=reason, values=values),
    )
    return lesson_page(request, lesson, status=400)


def _throttled(
    request: HttpRequest, lesson: Lesson, challenge: Challenge, retry_s: int
) -> HttpResponse:
    """Answer 429: checking an answer runs the lab's model in the web process, so a
    learner (or a client address) may have a bounded number checked in a minute."""
    limit = settings.LAB_CHALLENGE_ANSWERS_PER_MINUTE
    reason = (
        f"You have had {limit} answers checked in the last minute, the most a minute "
        f"allows; try again in {retry_s} s."
    )
    if _wants_json(request):
        response: HttpResponse = JsonResponse({"error": reason}, status=429)
    else:
        feedback_store(
            request.session, lesson.slug, challenge.id, Feedback(error=reason)
        )
        response = lesson_page(request, lesson, status=429)
    response["Retry-After"] = str(retry_s)
    return response


# --- the live check: a solved answer run on the live system --------------------------


class LiveConditionBody(TypedDict):
    source: str
    held: bool
    said: str


class LiveVerdictBody(TypedDict):
    confirmed: bool
    headline: str
    conditions: list[LiveConditionBody]
    explain: str
    job: str  # the finished run read


class LiveBody(TypedDict):
    """The live check as JSON: ``html`` is the block, the rest what it says."""

    pending: bool
    state: str
    confirmed: bool
    verdict: LiveVerdictBody | None
    html: str


def _live_state(
    request: HttpRequest, challenge: Challenge, note: Feedback | None = None
) -> LiveCheck:
    state = states_of(request, challenge.slug).get(challenge.id, NOT_STARTED)
    return live_check(
        request, challenge, state, refusal=live_refusal(request), note=note
    )


def _live_html(request: HttpRequest, challenge: Challenge, check: LiveCheck) -> str:
    return render_to_string(
        "course/_challenge_live.html",
        {
            "c": challenge,
            "live": check,
            "post_url": reverse(
                "course-challenge", args=[challenge.slug, challenge.id]
            ),
        },
        request=request,
    )


def _live_body(
    request: HttpRequest, challenge: Challenge, check: LiveCheck
) -> LiveBody:
    reading, finished = check.reading, check.finished
    verdict: LiveVerdictBody | None = None
    if reading is not None and finished is not None:
        verdict = {
            "confirmed": reading.verdict.confirmed,
            "headline": reading.verdict.headline,
            "conditions": [
                {"source": c.source, "held": c.held, "said": c.said}
                for c in reading.verdict.conditions
            ],
            "explain": reading.explain,
            "job": str(finished.id),
        }
    return {
        "pending": check.pending is not None,
        "state": check.pending.state if check.pending is not None else "",
        "confirmed": check.confirmed,
        "verdict": verdict,
        "html": _live_html(request, challenge, check),
    }


def _live(request: HttpRequest, lesson: Lesson, challenge: Challenge) -> HttpResponse:
    """Ask for a live run of the learner's solved answer, as the Run button asks
    for one (``lab_run_request``): the same quotas, fair queue, single flight and
    sandbox. The run's parameters come from the answer the model accepted, never
    from the form."""
    if not challenge.live_checked:
        return _live_refused(
            request, lesson, challenge, "this challenge has no live check", 400
        )
    refusal = live_refusal(request)
    if refusal:
        return _live_refused(request, lesson, challenge, refusal, 403)
    state = states_of(request, lesson.slug).get(challenge.id, NOT_STARTED)
    if not state.solved:
        return _live_refused(
            request,
            lesson,
            challenge,
            "solve the challenge with the model first: the live system runs the "
            "answer the model accepted",
            400,
        )
    try:
        params = challenge_live_params(challenge, state.answer)
        choice = Choice(request.POST.get("choice", Choice.AUTO))
    except (AnswerError, ChallengeUnavailable) as error:
        return _live_refused(request, lesson, challenge, str(error), 400)
    except ValueError:
        return _live_refused(
            request, lesson, challenge, "choice must be auto, fresh or reuse", 400
        )
    try:
        asked = lab_run_request(
            lab=lab_get(lesson.slug),
            params=params,
            requester=requester_of(request),
            live=True,
            choice=choice,
        )
    except LabRefused as refused:
        response = _live_refused(
            request,
            lesson,
            challenge,
            refused.refusal.message,
            REFUSAL_STATUS[refused.refusal.kind],
        )
        if refused.refusal.retry_after_s is not None:
            response["Retry-After"] = str(refused.refusal.retry_after_s)
        return response
    if asked.job is None:
        assert asked.offer is not None
        note = Feedback(headline=offer_text(asked.offer), live=True, offer=True)
        return _live_answer(request, lesson, challenge, note, status=200)
    user_id = user_id_of(request)
    assert user_id is not None  # live_refusal lets only accounts through
    progress_lab_run(user_id=user_id, slug=lesson.slug)
    return _live_answer(request, lesson, challenge, None, status=202)


def _live_answer(
    request: HttpRequest,
    lesson: Lesson,
    challenge: Challenge,
    note: Feedback | None,
    *,
    status: int,
) -> HttpResponse:
    """Answer with the live block as it now stands: JSON, or back to the lesson."""
    if not _wants_json(request):
        if note is not None:
            feedback_store(request.session, lesson.slug, challenge.id, note)
        return _back(lesson, challenge)
    check = _live_state(request, challenge, note)
    return JsonResponse(_live_body(request, challenge, check), status=status)


def _live_refused(
    request: HttpRequest,
    lesson: Lesson,
    challenge: Challenge,
    reason: str,
    status: int,
) -> HttpResponse:
    """Answer a live request that made no run: the reason, with its status."""
    reason = _sentence(reason)
    if _wants_json(request):
        body: dict[str, object] = {"error": reason}
        if user_id_of(request) is None:
            body["signup_url"] = reverse("account_signup")
        return JsonResponse(body, status=status)
    feedback_store(
        request.session,
        lesson.slug,
        challenge.id,
        Feedback(error=reason, live=True),
    )
    return lesson_page(request, lesson, status=status)


@require_GET
def course_challenge_live(
    request: HttpRequest, slug: str, challenge_id: str
) -> HttpResponse:
    """The live check of one challenge for this learner, as JSON: whether a run is
    still waiting or running, the verdict of the newest finished one, and the
    block's HTML (the page swaps it in)."""
    _, challenge = _found(slug, challenge_id)
    if not challenge.live_checked:
        raise Http404("This challenge has no live check")
    check = _live_state(request, challenge)
    response = JsonResponse(_live_body(request, challenge, check))
    response["Cache-Control"] = "private, no-store"
    return response
