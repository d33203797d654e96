"""What the lesson page shows of its challenges: the cards, the learner's state, and
the outcome of the answer just sent (kept in the session for one page view when
the form was sent without JavaScript)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest
from django.urls import reverse

from course.challenges.grading import ChallengeText, lesson_challenge_texts
from course.challenges.selectors import (
    NOT_STARTED,
    ChallengeState,
    challenge_states,
    session_states,
)
from course.lessons import lesson_get
from course.visitors import session_progress, user_id_of

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


@dataclass(frozen=True)
class Field:
    name: str
    value: str
    help: str


@dataclass(frozen=True)
class ChallengeCard:
    text: ChallengeText
    state: ChallengeState
    url: str
    fields: tuple[Field, ...]
    feedback: Feedback | None
    lessons: tuple[tuple[str, str], ...]  # (title, url) for the debrief

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
    )


def states_of(request: HttpRequest, slug: str) -> dict[str, ChallengeState]:
    """Return the learner's challenge states on ``slug``: account or session."""
    user_id = user_id_of(request)
    if user_id is not None:
        return challenge_states(user_id=user_id, slug=slug)
    entry: Mapping[str, Any] = session_progress(request.session).get(slug, {})
    return session_states(entry)


def challenge_panel(request: HttpRequest, slug: str) -> ChallengePanel:
    """Return the lesson's challenges as the page shows them to this learner."""
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
            )
        )
    return ChallengePanel(tuple(cards))
