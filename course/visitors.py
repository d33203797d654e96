"""Who is asking: a signed-in learner, or an anonymous visitor known by their session.

An anonymous visitor's runs are recorded under ``anon:<digest>`` of a random token
kept in their session (never the session key, which is a credential and changes
when they sign in), and their progress through the lessons is kept in the session
itself. Both carry over into the account they sign up for or sign in to from that
session (``course.services.learners.learner_adopt``).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import Any

from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest

TOKEN_KEY = "lab_visitor"
PROGRESS_KEY = "course_progress"


def user_id_of(request: HttpRequest) -> int | None:
    """Return the id of the signed-in, active user, or None."""
    user = request.user
    if not user.is_authenticated or not user.is_active:
        return None
    return int(user.pk)


def anonymous_visitor(session: SessionBase, *, create: bool = False) -> str:
    """Return the session's anonymous visitor name ("" if it has none yet).

    With ``create`` the token is made, so the visitor's first run has an owner.
    """
    token = session.get(TOKEN_KEY)
    if not isinstance(token, str) and create:
        token = secrets.token_hex(16)
        session[TOKEN_KEY] = token
    if not isinstance(token, str):
        return ""
    return "anon:" + hashlib.sha256(token.encode()).hexdigest()[:32]


def visitor_of(request: HttpRequest, *, create: bool = False) -> str:
    """Return who owns the runs made from this browser ("" if nobody yet)."""
    user_id = user_id_of(request)
    if user_id is not None:
        return f"user:{user_id}"
    return anonymous_visitor(request.session, create=create)


def client_address(request: HttpRequest) -> str:
    """Return the client's address as the server saw it (behind HAProxy, the
    forwarded one: daphne runs with ``--proxy-headers`` there)."""
    return str(request.META.get("REMOTE_ADDR") or "")


# --- An anonymous visitor's progress, kept in their session --------------------------


def session_progress(session: SessionBase) -> dict[str, dict[str, Any]]:
    """Return the visitor's progress per lesson slug, as kept in the session."""
    raw = session.get(PROGRESS_KEY)
    if not isinstance(raw, dict):
        return {}
    return {
        slug: entry
        for slug, entry in raw.items()
        if isinstance(slug, str) and isinstance(entry, dict)
    }


def session_progress_note(
    session: SessionBase,
    *,
    slug: str,
    read: bool = False,
    answer: int | None = None,
    lab_run: bool = False,
) -> None:
    """Record one step of the visitor's progress on ``slug`` in their session."""
    progress = session_progress(session)
    entry = dict(progress.get(slug, {}))
    if read:
        entry["read"] = True
    if answer is not None:
        answered = {n for n in entry.get("answered", []) if isinstance(n, int)}
        entry["answered"] = sorted(answered | {answer})
    if lab_run:
        entry["lab_runs"] = int(entry.get("lab_runs", 0)) + 1
    progress[slug] = entry
    session[PROGRESS_KEY] = progress


def session_challenge_note(
    session: SessionBase,
    *,
    slug: str,
    challenge: str,
    attempt: bool = False,
    hint_total: int | None = None,
    solved_answer: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Record an answer (``attempt``, and ``solved_answer`` when it was right) or one
    more hint opened (up to ``hint_total``) of a challenge; return its entry."""
    progress = session_progress(session)
    entry = dict(progress.get(slug, {}))
    challenges = challenge_entries(entry)
    state = dict(challenges.get(challenge, {}))
    if attempt:
        state["attempts"] = _count(state.get("attempts")) + 1
    if hint_total is not None:
        state["hints"] = min(_count(state.get("hints")) + 1, hint_total)
    if solved_answer is not None and state.get("solved") is not True:
        state["solved"] = True
        state["answer"] = dict(solved_answer)
    challenges[challenge] = state
    entry["challenges"] = challenges
    progress[slug] = entry
    session[PROGRESS_KEY] = progress
    return state


def _count(raw: object) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 0


def challenge_entries(entry: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Return a session progress entry's challenges: {id: {attempts, hints, solved,
    answer}}, whatever a tampered or older session holds."""
    raw = entry.get("challenges")
    if not isinstance(raw, dict):
        return {}
    return {
        str(cid): dict(state) for cid, state in raw.items() if isinstance(state, dict)
    }


def session_progress_clear(session: SessionBase) -> None:
    """Forget the visitor's session progress (it now lives in their account)."""
    session.pop(PROGRESS_KEY, None)


def progress_entry(entry: Mapping[str, Any]) -> tuple[bool, frozenset[int], int]:
    """Return (read, answered, lab runs) of one session progress entry."""
    answered = frozenset(n for n in entry.get("answered", []) if isinstance(n, int))
    runs = entry.get("lab_runs", 0)
    return entry.get("read") is True, answered, runs if isinstance(runs, int) else 0
