"""A lesson's challenges: check an answer with the lab's model, or open a hint.

``POST /course/<slug>/challenges/<id>`` with ``action=answer`` (the default) and the
challenge's fields (its parameters, or ``answer``), or ``action=hint``. With
``Accept: application/json`` the answer is JSON; a plain form (no JavaScript) is
sent back to the lesson at the challenge, its outcome shown there once. An answer
that cannot be checked is a 400 with the reason.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from course.challenges.checker import AnswerError, Verdict
from course.challenges.grading import (
    ChallengeUnavailable,
    challenge_check,
    challenge_text,
)
from course.challenges.pages import Feedback, feedback_store, states_of
from course.challenges.selectors import ChallengeState, state_of_entry
from course.challenges.services import challenge_attempt, challenge_hint
from course.challenges.spec import Challenge, challenge_get, challenge_ids
from course.lessons import Lesson, lesson_get
from course.ratelimits import minute_take
from course.views import HttpResponseSeeOther, lesson_page, rate_subject
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
    if action != "answer":
        return _refuse(request, lesson, challenge, "action must be answer or hint", {})
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
    return JsonResponse(
        {
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
