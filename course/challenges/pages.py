"""What the lesson page shows of its challenges: the cards, the learner's state, the
check of a solved answer on the live system, and the outcome of the request just
sent (kept in the session for one page view when the form was sent without
JavaScript)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest
from django.urls import reverse

from course.challenges.checker import AnswerError
from course.challenges.grading import (
    ChallengeText,
    ChallengeUnavailable,
    LiveReading,
    challenge_live_params,
    challenge_live_read,
    lesson_challenge_texts,
    live_fingerprint,
)
from course.challenges.live import run_tables
from course.challenges.selectors import (
    NO_LIVE_RUNS,
    NOT_STARTED,
    ChallengeState,
    challenge_states,
    live_runs_of,
    session_states,
)
from course.challenges.services import challenge_live_confirm
from course.challenges.spec import Challenge
from course.labs.harness.base import LabError, Params
from course.lessons import lesson_get
from course.visitors import session_progress, user_id_of, visitor_of
from jobs.models import JobStatus

log = logging.getLogger("course.challenges")

FEEDBACK_KEY = "challenge_feedback"


@dataclass(frozen=True)
class Feedback:
    """The outcome of the last answer, shown once under its challenge."""

    solved: bool = False
    headline: str = ""
    details: tuple[str, ...] = ()
    error: str = ""
    # The values the learner sent, put back in the form.
    values: Mapping[str, str] = field(default_factory=dict)
    # About the live check (a refusal, or an identical run offered), not the answer.
    live: bool = False
    offer: bool = False


@dataclass(frozen=True)
class Field:
    name: str
    value: str
    help: str


@dataclass(frozen=True)
class LiveCheck:
    """A challenge's check on the live system, as this learner sees it.

    ``pending`` is the learner's newest live run of their solved answer still
    waiting or running, ``finished`` the newest that finished, and ``reading``
    what that one showed (when it finished done). All are None for a learner who
    has not asked yet, and for anyone not signed in.
    """

    signed_in: bool
    # Why this learner may not ask for a live run ("" when they may).
    refusal: str
    solved: bool
    # The solved answer the live run takes, (parameter, value) as typed.
    answer: tuple[tuple[str, str], ...]
    # A live run met every live condition once: kept on the account.
    confirmed: bool
    # The JSON of this block, which the page reads while a run is pending.
    url: str
    pending: JobStatus | None = None
    finished: JobStatus | None = None
    reading: LiveReading | None = None
    # The finished run on the lesson page (its tables, beside the model's).
    run_url: str = ""
    # The outcome of the last request for a run, shown once (sent without JS).
    note: Feedback | None = None
    # The solved answer no longer makes a run (the lab changed): why.
    unavailable: str = ""

    @property
    def offered(self) -> bool:
        """Whether the page offers "Check it on the live system" now."""
        return (
            self.signed_in
            and not self.refusal
            and self.solved
            and not self.unavailable
            and self.pending is None
        )


@dataclass(frozen=True)
class ChallengeCard:
    text: ChallengeText
    state: ChallengeState
    url: str
    fields: tuple[Field, ...]
    feedback: Feedback | None
    lessons: tuple[tuple[str, str], ...]  # (title, url) for the debrief
    live: LiveCheck | None = None

    @property
    def challenge_id(self) -> str:
        return self.text.challenge.id

    @property
    def hints_shown(self) -> tuple[str, ...]:
        return self.text.hints[: self.state.hints]

    @property
    def hints_left(self) -> int:
        return max(0, len(self.text.hints) - self.state.hints)

    @property
    def next_hint(self) -> int:
        return min(self.state.hints + 1, len(self.text.hints))


@dataclass(frozen=True)
class ChallengePanel:
    cards: tuple[ChallengeCard, ...]

    @property
    def total(self) -> int:
        return len(self.cards)

    @property
    def solved(self) -> int:
        return sum(1 for card in self.cards if card.state.solved)

    @property
    def refused(self) -> ChallengeCard | None:
        """The card whose answer could not be checked, shown atop a 400 page."""
        return next(
            (c for c in self.cards if c.feedback is not None and c.feedback.error),
            None,
        )


def feedback_store(session: SessionBase, slug: str, cid: str, found: Feedback) -> None:
    """Keep the outcome of an answer sent without JavaScript for the next page view."""
    session[FEEDBACK_KEY] = {
        "slug": slug,
        "id": cid,
        "solved": found.solved,
        "headline": found.headline,
        "details": list(found.details),
        "error": found.error,
        "values": dict(found.values),
        "live": found.live,
        "offer": found.offer,
    }


def _feedback_take(session: SessionBase, slug: str) -> tuple[str, Feedback] | None:
    raw = session.get(FEEDBACK_KEY)
    if not isinstance(raw, dict) or raw.get("slug") != slug:
        return None
    session.pop(FEEDBACK_KEY, None)
    values = raw.get("values")
    details = raw.get("details")
    return str(raw.get("id", "")), Feedback(
        solved=raw.get("solved") is True,
        headline=str(raw.get("headline", "")),
        details=tuple(str(d) for d in details) if isinstance(details, list) else (),
        error=str(raw.get("error", "")),
        values={str(k): str(v) for k, v in values.items()}
        if isinstance(values, dict)
        else {},
        live=raw.get("live") is True,
        offer=raw.get("offer") is True,
    )


def states_of(request: HttpRequest, slug: str) -> dict[str, ChallengeState]:
    """Return the learner's challenge states on ``slug``: account or session."""
    user_id = user_id_of(request)
    if user_id is not None:
        return challenge_states(user_id=user_id, slug=slug)
    entry: Mapping[str, Any] = session_progress(request.session).get(slug, {})
    return session_states(entry)


def live_check(
    request: HttpRequest,
    challenge: Challenge,
    state: ChallengeState,
    *,
    refusal: str,
    note: Feedback | None = None,
) -> LiveCheck:
    """Return the live check of one challenge for this learner, who may run live
    parts unless ``refusal`` says why not (``course.views.live_refusal``: the lab
    service's own rule).

    The verdict is worked out here, from the finished run's stored tables, each
    time the page is shown; the first run that meets every condition is recorded
    on the learner's challenge (``challenge_live_confirm``), so the account page
    can say so without reading runs.
    """
    user_id = user_id_of(request)
    url = reverse("course-challenge-live", args=[challenge.slug, challenge.id])
    check = LiveCheck(
        signed_in=user_id is not None,
        refusal=refusal,
        solved=state.solved,
        answer=tuple(state.answer.items()),
        confirmed=state.live_confirmed,
        url=url,
        note=note,
    )
    if user_id is None or not state.solved:
        return check
    try:
        params = challenge_live_params(challenge, state.answer)
    except (AnswerError, ChallengeUnavailable, LabError) as error:
        return replace(check, unavailable=str(error))
    fingerprint = live_fingerprint(challenge, params)
    runs = live_runs_of(
        visitor=visitor_of(request), slug=challenge.slug, fingerprints=[fingerprint]
    ).get(fingerprint, NO_LIVE_RUNS)
    check = replace(check, pending=runs.pending, finished=runs.finished)
    finished = runs.finished
    if finished is None or finished.state != JobStatus.State.DONE:
        return check
    reading = _reading(challenge, params, finished)
    lesson = reverse("course-lesson", args=[challenge.slug])
    check = replace(
        check, reading=reading, run_url=f"{lesson}?job={finished.id}#lab-results"
    )
    if reading is not None and reading.verdict.confirmed and not state.live_confirmed:
        challenge_live_confirm(
            user_id=user_id,
            slug=challenge.slug,
            challenge=challenge.id,
            job_id=finished.id,
        )
        check = replace(check, confirmed=True)
    return check


def _reading(
    challenge: Challenge, params: Params, job: JobStatus
) -> LiveReading | None:
    try:
        return challenge_live_read(challenge, params, run_tables(job.result))
    except (ChallengeUnavailable, LabError) as error:
        log.error("live check %s/%s: %s", challenge.slug, challenge.id, error)
        return None


def challenge_panel(
    request: HttpRequest, slug: str, *, live_refusal: str
) -> ChallengePanel:
    """Return the lesson's challenges as the page shows them to this learner, who
    may run live parts unless ``live_refusal`` says why not."""
    texts = lesson_challenge_texts(slug)
    if not texts:
        return ChallengePanel(())
    states = states_of(request, slug)
    taken = _feedback_take(request.session, slug)
    cards = []
    for text in texts:
        cid = text.challenge.id
        state = states.get(cid, NOT_STARTED)
        feedback = taken[1] if taken is not None and taken[0] == cid else None
        note = feedback if feedback is not None and feedback.live else None
        if note is not None:
            feedback = None
        live = (
            live_check(request, text.challenge, state, refusal=live_refusal, note=note)
            if text.challenge.live_checked
            else None
        )
        shown = feedback.values if feedback is not None else state.answer
        cards.append(
            ChallengeCard(
                text=text,
                state=state,
                url=reverse("course-challenge", args=[slug, cid]),
                fields=tuple(
                    Field(name, shown.get(name, value), help)
                    for name, value, help in text.fields
                ),
                feedback=feedback,
                lessons=tuple(
                    (lesson.title, reverse("course-lesson", args=[lesson.slug]))
                    for other in text.challenge.lessons
                    if (lesson := lesson_get(other)) is not None
                ),
                live=live,
            )
        )
    return ChallengePanel(tuple(cards))
