"""Learner accounts on django-allauth: the site's rules for signing up and in.

- A visitor's runs and progress, kept in their session, carry over into the account
  they sign up for or sign in to from that session (``learner_adopt``).
- A learner who signed up verifies their e-mail address before signing in. An
  account an operator made (the admin, ``seed_library``, ``createsuperuser``) has no
  address on record to verify and signs in as it always did.
"""

from __future__ import annotations

import logging
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest

from course.services.learners import learner_adopt
from course.visitors import anonymous_visitor, session_progress, session_progress_clear

log = logging.getLogger("course.accounts")

_VERIFY_STAGE = "allauth.account.stages.EmailVerificationStage"


class LearnerAccountAdapter(DefaultAccountAdapter):
    """allauth's adapter with the course's two rules (see the module)."""

    def save_user(
        self, request: HttpRequest, user: Any, form: Any, commit: bool = True
    ) -> Any:
        saved = super().save_user(request, user, form, commit=commit)
        if commit:
            _adopt_session(request, saved)
        return saved

    def login(self, request: HttpRequest, user: AbstractBaseUser) -> None:
        # Read before signing in: a visitor's session keeps its data through the
        # sign-in (Django only cycles its key), but a switch of user flushes it.
        visitor = anonymous_visitor(request.session)
        progress = session_progress(request.session)
        super().login(request, user)
        if visitor or progress:
            _adopt(request, user, visitor, progress)

    def get_login_stages(self) -> list[str]:
        stages = super().get_login_stages()
        return [
            "course.account_stages.OperatorMadeAccountsVerified"
            if stage == _VERIFY_STAGE
            else stage
            for stage in stages
        ]


def _adopt_session(request: HttpRequest, user: AbstractBaseUser) -> None:
    visitor = anonymous_visitor(request.session)
    progress = session_progress(request.session)
    if visitor or progress:
        _adopt(request, user, visitor, progress)


def _adopt(
    request: HttpRequest,
    user: AbstractBaseUser,
    visitor: str,
    progress: dict[str, dict[str, Any]],
) -> None:
    adopted = learner_adopt(user_id=int(user.pk), visitor=visitor, progress=progress)
    session_progress_clear(request.session)
    if adopted.runs or adopted.lessons or adopted.challenges:
        log.info(
            "account %s took over %s runs and %s lessons' progress from its session",
            user.pk,
            adopted.runs,
            adopted.lessons,
        )
